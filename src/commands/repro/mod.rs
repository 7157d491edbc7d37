//! `npu-audit repro`: the smallest window of consecutive layers whose isolated run, fed the
//! golden run's activations, departs on the target and not on the comparison; cut out as a
//! standalone bundle (model, inputs, expected outputs, a plain onnxruntime script) that is run
//! alone before it is written, so a bundle that does not reproduce is never written as if it did.
//!
//! Plan (the audit's plan: model, reference, inputs, runtimes) -> golden run with every paired
//! activation exposed -> start (`--layer`, the first layer that departs alone, or the first that
//! departs in the whole model) -> delta debugging over windows (`search`) -> bundle, verified
//! (and scrubbed) -> report.

mod assemble;
pub mod bundle;
pub mod figures;
mod files;
pub mod graph;
pub mod search;
mod verify;
pub mod windows;

use std::path::PathBuf;

use anyhow::{Context as _, Result};

use crate::analyses::layers::state::result_of;
use crate::analyses::layers::tap::tapped;
use crate::commands::compare::plan::AuditPlan;
use crate::commands::compare::reference::ReferencePlan;
use crate::commands::compare::{Audited, CompareOptions};
use crate::data::model::rewrite::write_model;
use crate::data::target::TargetSpec;
use crate::execution::exec::executor::{cpu_runtime, reference_job};
use crate::execution::exec::{ExecOptions, Executor, JobResult, PlannedTarget};
use crate::foundation::error::{bad_flag, run_error};
use crate::foundation::userfile::{InputFiles, Outputs, Reads};
use crate::report::repro::{Criterion, ReproReport, StartPoint};
use graph::{Layered, Window};
use windows::{Against, Evaluator};

pub use assemble::is_zip;

/// What the target is compared with.
#[derive(Debug, Clone)]
pub enum AgainstChoice {
    /// The golden run's activations, quantized as the model quantizes them.
    Golden,
    /// Another target (`cpu`, `cpu:noopt`, the same chipset at another release, ...).
    Target(TargetSpec),
}

/// What `repro` is asked.
#[derive(Debug, Clone)]
pub struct ReproOptions {
    /// The model, its float reference and the inputs.
    pub audited: Audited,
    pub exec: ExecOptions,
    pub target: TargetSpec,
    pub against: AgainstChoice,
    /// Start from this layer (node, tensor or float tensor name) instead of searching.
    pub layer: Option<String>,
    pub criterion: Criterion,
    /// `--scrub-weights`: the seed of the replacement weights.
    pub scrub_seed: Option<u64>,
    /// Where the bundle goes (a directory, or a file ending in `.zip`).
    pub bundle: Option<PathBuf>,
}

impl Reads for ReproOptions {
    fn declare(&self, set: &mut InputFiles) {
        let ReproOptions {
            audited,
            exec,
            target: _,
            against: _,
            layer: _,
            criterion: _,
            scrub_seed: _,
            bundle: _,
        } = self;
        set.with(audited).with(exec);
    }
}

/// Everything the search runs on, planned and provisioned.
struct Prepared {
    plan: AuditPlan,
    executor: Executor,
    input_files: Vec<Vec<crate::data::inputs::InputFile>>,
    layered: Layered,
    golden: JobResult,
}

/// Runs `repro`: the report, and the bundle's files when one reproduces (staged in `outputs`
/// with `--out`).
pub fn run(opts: &ReproOptions, outputs: &mut Outputs) -> Result<ReproReport> {
    let prepared = prepare(opts, outputs)?;
    let Prepared {
        plan,
        executor,
        input_files,
        layered,
        golden,
    } = &prepared;
    let target = &plan.targets[0];
    let against = match &opts.against {
        AgainstChoice::Golden => Against::Golden,
        AgainstChoice::Target(_) => Against::Target(&plan.targets[1]),
    };
    if let Some(report) = assemble::unavailable(opts, plan) {
        return Ok(report);
    }
    let mut eval = Evaluator::new(
        layered,
        &plan.model,
        executor,
        target,
        against,
        golden,
        input_files,
        &plan.inputs.free_dims,
        &opts.criterion,
    );
    let start = start(opts, &mut eval)?;
    let window = match &start {
        Some(s) => search::minimal_window(&mut eval, s.layer.position, s.reason == "layer_flag")?,
        None => None,
    };
    assemble::finish(opts, plan, &mut eval, start, window, outputs)
}

/// The plan, the executor, the inputs written and the golden run with every paired activation.
fn prepare(opts: &ReproOptions, outputs: &mut Outputs) -> Result<Prepared> {
    let mut targets = vec![opts.target.clone()];
    if let AgainstChoice::Target(t) = &opts.against {
        if t.id == opts.target.id {
            return Err(bad_flag(format!("--against {} is the target itself", t.id)));
        }
        targets.push(t.clone());
    }
    let copts = CompareOptions::findings(opts.audited.clone(), targets, opts.exec.clone());
    let plan = AuditPlan::new(&copts, outputs)?;
    let ReferencePlan::Model { model: reference, .. } = &plan.reference else {
        return Err(bad_flag(
            "repro feeds windows from the reference's activations: give --reference",
        ));
    };
    let layered = Layered::new(&plan.model, reference, &plan.inputs.shapes())?;
    if layered.layers.is_empty() {
        return Err(crate::foundation::error::bad_model("the model has no layer to cut"));
    }
    let executor = Executor::new(&opts.exec)?;
    executor.expect_model_bytes(plan.model.total_bytes());
    let input_files = plan.inputs.write(&executor.work().join("inputs"))?;
    let golden = golden_run(&plan, &executor, &layered, &input_files, reference)?;
    Ok(Prepared {
        plan,
        executor,
        input_files,
        layered,
        golden,
    })
}

/// The reference on the CPU with every activation a window may read or be measured against.
fn golden_run(
    plan: &AuditPlan,
    executor: &Executor,
    layered: &Layered,
    input_files: &[Vec<crate::data::inputs::InputFile>],
    reference: &crate::data::model::LoadedModel,
) -> Result<JobResult> {
    let cpu = cpu_runtime(&plan.provisioner)?;
    let dir = executor.work().join("golden");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("reference.onnx");
    // The reference's inputs pinned as the audited model's are, to the samples' shapes.
    let mut proto = tapped(&reference.proto, &layered.reference_taps());
    crate::data::model::rewrite::pin_input_shapes(&mut proto, &plan.inputs.shapes());
    write_model(&proto, reference, &path)?;
    let job = reference_job(&cpu, path, input_files, &dir, &plan.inputs.free_dims);
    let outcome = executor.run(&[job])?.into_iter().next().context("no golden run")?;
    result_of(&outcome)
        .cloned()
        .map_err(|e| run_error(format!("the golden run (the reference on the CPU) failed: {e}")))
}

/// Where the search starts: `--layer`, else the first layer that departs alone, else the first
/// whose output departs in the whole model (or the last, when the target refuses the whole
/// model); `None` when nothing departs.
fn start(opts: &ReproOptions, eval: &mut Evaluator<'_>) -> Result<Option<StartPoint>> {
    let layered = eval.layered;
    if let Some(name) = &opts.layer {
        let k = layered.find(name).ok_or_else(|| {
            bad_flag(format!(
                "--layer {name}: the model has no layer of that node or tensor name ({} layers, from {} to {})",
                layered.layers.len(),
                layered.layer_ref(0).node,
                layered.layer_ref(layered.layers.len() - 1).node
            ))
        })?;
        return Ok(Some(point(layered, k, "layer_flag")));
    }
    let singles: Vec<Window> = (0..layered.layers.len()).map(|k| (k, k)).collect();
    let judged = eval.judge(&singles)?;
    if let Some(k) = judged.iter().position(|j| j.departs) {
        let reason = if judged[k].target_fails {
            "first_failure"
        } else {
            "first_isolated_departure"
        };
        return Ok(Some(point(layered, k, reason)));
    }
    Ok(assemble::whole_model(eval)?.map(|(k, reason)| point(layered, k, reason)))
}

fn point(layered: &Layered, k: usize, reason: &str) -> StartPoint {
    StartPoint {
        layer: layered.layer_ref(k),
        reason: reason.to_string(),
    }
}

/// Why a planned target cannot run on this machine, if it cannot.
fn runtime_problem(t: &PlannedTarget) -> Option<String> {
    t.runtime.as_ref().err().map(|e| format!("{}: {e}", t.spec.id))
}

/// A window's layers as the search names them, for messages.
fn describe(layered: &Layered, (a, b): Window) -> String {
    let first = layered.layer_ref(a);
    if a == b {
        return format!("{} ({})", first.node, first.op_type);
    }
    let last = layered.layer_ref(b);
    format!(
        "{} ({}) .. {} ({}), {} layers",
        first.node,
        first.op_type,
        last.node,
        last.op_type,
        b - a + 1
    )
}
