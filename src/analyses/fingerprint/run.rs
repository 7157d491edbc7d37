//! Running the probes on targets: one worker process per (target, probe), so a probe that crashes
//! a vendor EP costs that probe only; verdicts assembled per target; cached fingerprints reused.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use prost::Message;

use super::cache;
use super::classify::classify;
use super::probes::Probe;
use super::result::{ProbeResult, TargetFingerprint};
use crate::data::inputs::InputFile;
use crate::data::target::Backend;
use crate::data::tensor::Tensor;
use crate::execution::exec::executor::target_job;
use crate::execution::exec::RunStatus;
use crate::execution::exec::{Executor, PlannedTarget};
use crate::execution::exec::{Job, ModelScope, Outcome};

/// How to fingerprint.
#[derive(Debug, Clone)]
pub struct FingerprintOptions {
    /// Runs per probe with identical inputs (determinism).
    pub repeat: usize,
    /// Ignore cached fingerprints (they are still refreshed).
    pub refresh: bool,
    /// Use and fill the cache at all.
    pub use_cache: bool,
}

/// A probe written to disk for the workers.
struct WrittenProbe {
    model: PathBuf,
    inputs: Vec<InputFile>,
}

fn write_probe(probe: &Probe, dir: &Path) -> Result<WrittenProbe> {
    let pdir = dir.join("probes").join(probe.id);
    std::fs::create_dir_all(&pdir).with_context(|| format!("cannot create {}", pdir.display()))?;
    let model = pdir.join("model.onnx");
    std::fs::write(&model, probe.model.encode_to_vec()).with_context(|| format!("cannot write {}", model.display()))?;
    let mut inputs = Vec::new();
    for (i, (name, t)) in probe.inputs.iter().enumerate() {
        let path = pdir.join(format!("i{i}.npy"));
        t.write_npy(&path)?;
        inputs.push(InputFile {
            name: name.clone(),
            path,
        });
    }
    Ok(WrittenProbe { model, inputs })
}

/// Fingerprints every target: cached ones are read back, the rest run every probe in `probes`.
/// Targets without a runtime get a row that says why.
pub fn fingerprint(
    targets: &[PlannedTarget],
    probes: &[Probe],
    executor: &Executor,
    opts: &FingerprintOptions,
) -> Result<Vec<TargetFingerprint>> {
    let complete_set = probes.len() == super::probes::all().len();
    let mut rows: Vec<Option<TargetFingerprint>> = Vec::with_capacity(targets.len());
    for t in targets {
        let Ok(rt) = &t.runtime else {
            rows.push(Some(unavailable(t)));
            continue;
        };
        let cached = if opts.use_cache && !opts.refresh && complete_set {
            cache::load(&t.spec, rt, opts.repeat)
        } else {
            None
        };
        rows.push(cached);
    }
    let to_run: Vec<usize> = (0..targets.len()).filter(|&i| rows[i].is_none()).collect();
    if to_run.is_empty() {
        return Ok(rows.into_iter().flatten().collect());
    }

    let work = executor.work().join("fingerprint");
    let written: Vec<WrittenProbe> = probes.iter().map(|p| write_probe(p, &work)).collect::<Result<_>>()?;
    let mut jobs: Vec<(Job, PathBuf)> = Vec::new();
    for &ti in &to_run {
        let t = &targets[ti];
        for (probe, w) in probes.iter().zip(&written) {
            let run_dir = work.join("runs").join(probe.id);
            let samples = [w.inputs.clone()];
            let probe = (w.model.as_path(), ModelScope::Part);
            if let Some((mut job, dir)) = target_job(ti, t, probe, &samples, &run_dir, 1, &[]) {
                job.repeat = opts.repeat.max(1);
                jobs.push((job, dir));
            }
        }
    }
    let outcomes = executor.run(&jobs)?;

    let mut outcome_iter = outcomes.iter();
    for &ti in &to_run {
        let t = &targets[ti];
        let Ok(rt) = &t.runtime else { continue };
        let mut results = Vec::with_capacity(probes.len());
        let mut ort_version = None;
        let mut all_finished = true;
        for probe in probes {
            let Some(outcome) = outcome_iter.next() else { break };
            if let Some(v) = outcome.result.as_ref().and_then(|r| r.ort_version.clone()) {
                ort_version = Some(v);
            }
            all_finished &= matches!(outcome.status, RunStatus::Ok | RunStatus::Failed);
            results.push(probe_result(probe, outcome, &t.spec.backend, opts.repeat.max(1)));
        }
        let fp = TargetFingerprint {
            target: t.spec.id.clone(),
            status: "ok".into(),
            error: None,
            ort_version,
            runtime: Some(cache::runtime_identity(rt)),
            cached: false,
            probes: results,
        };
        if opts.use_cache && complete_set && all_finished {
            if let Err(e) = cache::store(&t.spec, rt, opts.repeat, &fp) {
                crate::foundation::console::note(format!(
                    "cannot cache the fingerprint of {}: {}",
                    t.spec.id,
                    crate::foundation::error::one_line(&e)
                ));
            }
        }
        rows[ti] = Some(fp);
    }
    Ok(rows.into_iter().flatten().collect())
}

fn unavailable(t: &PlannedTarget) -> TargetFingerprint {
    TargetFingerprint {
        target: t.spec.id.clone(),
        status: "unavailable".into(),
        error: t.runtime.as_ref().err().cloned(),
        ort_version: None,
        runtime: None,
        cached: false,
        probes: vec![],
    }
}

/// A probe's verdict from its worker's outcome: refused or crashed probes say so; a probe whose
/// key ops ran on the CPU EP of a non-CPU target is `cpu_fallback` (the numbers are the CPU's).
fn probe_result(probe: &Probe, outcome: &Outcome, backend: &Backend, repeats: usize) -> ProbeResult {
    let failed = |verdict: &str, error: String| ProbeResult {
        verdict: verdict.into(),
        summary: verdict.replace('_', " "),
        repeats: 0,
        error: Some(error),
        ..ProbeResult::blank(probe)
    };
    let result = match (&outcome.status, &outcome.result) {
        (RunStatus::Ok, Some(r)) => r,
        (RunStatus::Failed, _) => {
            return failed(
                "refused",
                outcome
                    .error
                    .clone()
                    .unwrap_or_else(|| "the target refused the probe".into()),
            )
        }
        (status, _) => {
            return failed(
                status.as_str(),
                outcome
                    .error
                    .clone()
                    .unwrap_or_else(|| format!("the worker {}", status.as_str())),
            )
        }
    };
    let observed: Result<Vec<Tensor>> = result
        .outputs
        .first()
        .map(|files| files.iter().map(|f| Tensor::read_npy(&f.path)).collect())
        .unwrap_or_else(|| Ok(vec![]));
    let mut r = match observed.and_then(|o| classify(probe, &o)) {
        Ok(r) => r,
        Err(e) => return failed("other", crate::foundation::error::one_line(&e)),
    };
    r.repeats = repeats;
    r.repeat_differences = result.repeat_differences.iter().map(|d| d.differing).sum();

    let ep = backend.ep_name();
    let placed: Vec<(&str, &str)> = result
        .placement
        .iter()
        .flat_map(|s| s.nodes.iter().map(move |n| (s.ep.as_str(), n.op_type.as_str())))
        .collect();
    if !placed.is_empty() {
        let on = placed.iter().filter(|(e, _)| *e == ep).count();
        r.placement = Some(format!("{on}/{} nodes on {ep}", placed.len()));
        let key_off = placed.iter().any(|(e, op)| *e != ep && probe.key_ops.contains(op));
        if key_off && !matches!(backend, Backend::Cpu) {
            r.summary = format!("CPU fallback ({})", r.summary);
            r.verdict = "cpu_fallback".into();
        }
    }
    if r.repeat_differences > 0 {
        r.summary = format!("non-deterministic ({} elements)", r.repeat_differences);
        r.verdict = "non_deterministic".into();
    }
    r
}
