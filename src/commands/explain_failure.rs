//! `explain-failure`: when a target refuses a model at session creation (QNN "Failed to finalize
//! graph ... 1002", an op its HTP arch cannot build), compile sub-models to find the node that
//! triggers it. First the shortest failing prefix of the graph in execution order (its last node
//! is the trigger), then the shortest failing window ending there (does the node fail alone, or
//! only with what precedes it?). Each compile is a worker process, so a crash is a result too.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;

use crate::analyses::placement::targets::{measure, Probe};
use crate::data::inputs::{prepare, InputOptions};
use crate::data::model::rewrite::write_model;
use crate::data::model::slice::{sub_model, MeasuredType};
use crate::data::model::topology::Topology;
use crate::data::model::{load_model, LoadedModel, Signature};
use crate::execution::exec::executor::{cpu_runtime, model_for_workers, target_job};
use crate::execution::exec::selection;
use crate::execution::exec::{ExecOptions, Executor, Job, PlannedTarget};
use crate::execution::runtime::Provisioner;
use crate::foundation::error::{bad_flag, bad_model};
use crate::report::RunStatus;

/// What `explain-failure` was asked to do.
#[derive(Debug, Clone)]
pub struct ExplainOptions {
    pub model: PathBuf,
    pub targets: Vec<crate::data::target::TargetSpec>,
    pub inputs: InputOptions,
    pub exec: ExecOptions,
}

impl crate::foundation::userfile::Reads for ExplainOptions {
    fn declare(&self, set: &mut crate::foundation::userfile::InputFiles) {
        let ExplainOptions {
            model,
            targets: _,
            inputs,
            exec,
        } = self;
        set.add(model).with(inputs).with(exec);
    }
}

/// A node by position in execution order, name and op type.
#[derive(Debug, Clone, Serialize)]
pub struct NodeRef {
    pub index: usize,
    pub name: String,
    pub op_type: String,
}

/// One compile of a sub-model.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// `full`, `prefix` or `window`.
    pub kind: String,
    /// First and last node (execution order, inclusive).
    pub first: usize,
    pub last: usize,
    /// `ok`, `failed`, `crashed`, `timeout`, or `not_built` (a window input had no known type).
    pub status: String,
    pub error: Option<String>,
}

/// The finding for one target.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    pub target: String,
    /// `accepted` (the full model compiles), `explained`, `unavailable`, or `inconclusive`.
    pub outcome: String,
    pub full_model_error: Option<String>,
    /// The last node of the shortest failing prefix.
    pub trigger: Option<NodeRef>,
    /// The shortest failing window that ends at the trigger.
    pub window: Vec<NodeRef>,
    /// Whether the trigger fails on its own (a one-node window).
    pub fails_alone: Option<bool>,
    /// The error of the smallest failing sub-model.
    pub window_error: Option<String>,
    pub steps: Vec<Step>,
    pub summary: String,
}

/// The compilable units: every node but `Constant` (data), in execution order, with its index in
/// the model's node list.
fn units(topo: &Topology) -> Vec<(usize, NodeRef)> {
    topo.topological_order()
        .into_iter()
        .filter(|&i| !(topo.nodes[i].op_type == "Constant" && topo.nodes[i].domain.is_empty()))
        .enumerate()
        .map(|(k, i)| {
            (
                i,
                NodeRef {
                    index: k,
                    name: topo.nodes[i].name.clone(),
                    op_type: topo.nodes[i].op_type.clone(),
                },
            )
        })
        .collect()
}

struct Bisector<'a> {
    target: &'a PlannedTarget,
    model: &'a LoadedModel,
    proto: &'a crate::data::model::pb::ModelProto,
    units: &'a [(usize, NodeRef)],
    types: &'a HashMap<String, MeasuredType>,
    free_dims: &'a [(String, i64)],
    dir: PathBuf,
    executor: &'a Executor,
    steps: Vec<Step>,
    cache: HashMap<(usize, usize), bool>,
}

impl Bisector<'_> {
    /// Compiles the units `first..=last` (or the model file itself for `full`); true when the
    /// target refuses it.
    fn fails(&mut self, kind: &str, first: usize, last: usize) -> Result<bool> {
        if let Some(&f) = self.cache.get(&(first, last)) {
            return Ok(f);
        }
        crate::foundation::interrupt::check()?;
        let n = self.steps.len();
        let path = self.dir.join(format!("step-{n}.onnx"));
        let keep: BTreeSet<usize> = self.units[first..=last].iter().map(|(i, _)| *i).collect();
        let Some(sub) = sub_model(self.proto, &keep, self.types) else {
            self.steps.push(Step {
                kind: kind.into(),
                first,
                last,
                status: "not_built".into(),
                error: Some("a tensor the window reads has no measured type".into()),
            });
            return Ok(false);
        };
        write_model(&sub, self.model, &path)?;
        let (status, error) = self.compile(&path, n)?;
        let failed = status != RunStatus::Ok;
        self.steps.push(Step {
            kind: kind.into(),
            first,
            last,
            status: status.as_str().into(),
            error,
        });
        self.cache.insert((first, last), failed);
        Ok(failed)
    }

    fn compile(&self, model: &Path, n: usize) -> Result<(RunStatus, Option<String>)> {
        let (mut job, dir): (Job, PathBuf) = target_job(
            n,
            self.target,
            (model, crate::execution::exec::ModelScope::Part),
            &[],
            &self.dir.join(format!("step-{n}")),
            1,
            self.free_dims,
        )
        .ok_or_else(|| anyhow::anyhow!("the target's runtime is not available"))?;
        job.compile_only = true;
        let outcomes = self.executor.run(&[(job, dir)])?;
        let o = &outcomes[0];
        let mut error = o.error.clone();
        if let Some(e) = error.as_mut() {
            crate::execution::exec::log::add_logged_reason(e, &o.log);
        }
        Ok((o.status.into(), error))
    }
}

/// The last unit of the shortest failing prefix, or `None` when every prefix compiles (the
/// failure depends on the graph as a whole).
fn shortest_failing_prefix(b: &mut Bisector<'_>) -> Result<Option<usize>> {
    let n = b.units.len();
    // prefix(lo) compiles, prefix(hi) fails.
    let (mut lo, mut hi) = (0usize, n);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if b.fails("prefix", 0, mid - 1)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if hi == n && !b.fails("prefix", 0, n - 1)? {
        return Ok(None);
    }
    Ok(Some(hi - 1))
}

/// The first unit of the shortest failing window ending at `last`, and whether `last` fails
/// alone.
fn shortest_failing_window(b: &mut Bisector<'_>, last: usize) -> Result<(usize, bool)> {
    if b.fails("window", last, last)? {
        return Ok((last, true));
    }
    // window(s_fail) fails, window(s_ok) compiles.
    let (mut s_fail, mut s_ok) = (0usize, last);
    while s_ok - s_fail > 1 {
        let mid = (s_fail + s_ok) / 2;
        if b.fails("window", mid, last)? {
            s_fail = mid;
        } else {
            s_ok = mid;
        }
    }
    Ok((s_fail, false))
}

/// The error of the smallest failing sub-model ending at `last`.
fn window_error(steps: &[Step], first: usize, last: usize) -> Option<String> {
    steps
        .iter()
        .rev()
        .find(|s| s.first == first && s.last == last && s.status != "ok" && s.status != "not_built")
        .or_else(|| {
            steps
                .iter()
                .find(|s| s.kind == "prefix" && s.last == last && s.status != "ok")
        })
        .and_then(|s| s.error.clone())
}

/// The one-sentence finding.
fn finding(id: &str, trigger: &NodeRef, first: usize, last: usize, alone: bool) -> String {
    if alone {
        format!(
            "node #{} '{}' ({}) triggers it: a model of that node alone fails to compile on {id}",
            trigger.index, trigger.name, trigger.op_type
        )
    } else if first == 0 {
        format!(
            "the failure appears when node #{} '{}' ({}) is added to everything before it, and no shorter window fails: \
             it depends on the accumulated graph (size or memory), not on that node alone",
            trigger.index, trigger.name, trigger.op_type
        )
    } else {
        format!(
            "node #{} '{}' ({}) triggers it together with the {} node(s) before it (#{}..#{}); alone it compiles",
            trigger.index,
            trigger.name,
            trigger.op_type,
            last - first,
            first,
            last
        )
    }
}

/// An explanation without a trigger.
fn blank(
    target: &str,
    outcome: &str,
    full_model_error: Option<String>,
    steps: Vec<Step>,
    summary: String,
) -> Explanation {
    Explanation {
        target: target.to_string(),
        outcome: outcome.into(),
        full_model_error,
        trigger: None,
        window: vec![],
        fails_alone: None,
        window_error: None,
        steps,
        summary,
    }
}

/// Bisects one target. `full_error` is the full model's failure.
fn bisect(b: &mut Bisector<'_>, full_error: Option<String>) -> Result<Explanation> {
    let id = b.target.spec.id.clone();
    let Some(last) = shortest_failing_prefix(b)? else {
        // The full model fails but the same nodes rebuilt as a sub-model compile: the failure
        // depends on something the slicing changes (outputs, graph I/O), not on a node.
        let summary = format!(
            "{id} refuses the model, but every node rebuilt as a sub-model (all intermediate tensors exposed) compiles: \
             the failure depends on the graph as a whole, not on one node"
        );
        return Ok(blank(
            &id,
            "inconclusive",
            full_error,
            std::mem::take(&mut b.steps),
            summary,
        ));
    };
    let trigger = b.units[last].1.clone();
    let (first, alone) = shortest_failing_window(b, last)?;
    let window: Vec<NodeRef> = b.units[first..=last].iter().map(|(_, r)| r.clone()).collect();
    Ok(Explanation {
        summary: finding(&id, &trigger, first, last, alone),
        target: id,
        outcome: "explained".into(),
        full_model_error: full_error,
        trigger: Some(trigger),
        window,
        fails_alone: Some(alone),
        window_error: window_error(&b.steps, first, last),
        steps: std::mem::take(&mut b.steps),
    })
}

/// What every target's bisection shares: the model as the workers load it, its compilable
/// units, the inputs, and the types of intermediate tensors (measured once, when needed).
struct Shared {
    model: LoadedModel,
    proto: crate::data::model::pb::ModelProto,
    model_path: PathBuf,
    topology: Topology,
    units: Vec<(usize, NodeRef)>,
    inputs: crate::data::inputs::InputSet,
    input_files: Vec<Vec<crate::data::inputs::InputFile>>,
    types: Option<HashMap<String, MeasuredType>>,
}

/// Runs `explain-failure` for every requested target.
pub fn run(opts: &ExplainOptions) -> Result<Vec<Explanation>> {
    if opts.targets.is_empty() {
        return Err(bad_flag("explain-failure needs at least one --target"));
    }
    let requested = selection::targets(
        Some(&opts.targets),
        &[crate::data::target::TargetPattern::all()],
        false,
        &Default::default(),
    )?;
    let provisioner = Provisioner::new(&opts.exec.runtimes)?;
    let model = load_model(&opts.model)?;
    let signature = Signature::of(&model)?;
    let inputs = prepare(&signature, &opts.inputs)?;
    let planned = selection::provision(requested, &provisioner)?;
    let executor = Executor::new(&opts.exec)?;
    let work = executor.work();
    let input_files = inputs.write(&work.join("inputs"))?;
    let model_path = model_for_workers(&model, &inputs, work, "model.onnx", &mut Vec::new())?;
    let proto = if model_path == model.path {
        model.proto.clone()
    } else {
        load_model(&model_path)?.proto
    };
    let topology = Topology::of_model(&proto);
    let units = units(&topology);
    if units.is_empty() {
        return Err(bad_model(format!("{} has no nodes", opts.model.display())));
    }
    let mut shared = Shared {
        model,
        proto,
        model_path,
        topology,
        units,
        inputs,
        input_files,
        types: None,
    };
    let mut out = Vec::new();
    for (k, target) in planned.iter().enumerate() {
        out.push(match &target.runtime {
            Err(reason) => unavailable(&target.spec.id, reason),
            Ok(_) => explain_target(&mut shared, target, k, &executor, &provisioner)?,
        });
    }
    Ok(out)
}

/// Compiles the whole model on one target and, when it fails, bisects it.
fn explain_target(
    shared: &mut Shared,
    target: &PlannedTarget,
    k: usize,
    executor: &Executor,
    provisioner: &Provisioner,
) -> Result<Explanation> {
    let dir = executor.work().join(format!("t{k}"));
    std::fs::create_dir_all(&dir)?;
    let empty = HashMap::new();
    let mut b = Bisector {
        target,
        model: &shared.model,
        proto: &shared.proto,
        units: &shared.units,
        types: &empty,
        free_dims: &shared.inputs.free_dims,
        dir,
        executor,
        steps: Vec::new(),
        cache: HashMap::new(),
    };
    let (status, error) = b.compile(&shared.model_path, 0)?;
    b.steps.push(Step {
        kind: "full".into(),
        first: 0,
        last: shared.units.len() - 1,
        status: status.as_str().into(),
        error: error.clone(),
    });
    if status == RunStatus::Ok {
        let summary = format!("{} compiles the whole model: nothing to explain", target.spec.id);
        return Ok(blank(&target.spec.id, "accepted", None, b.steps, summary));
    }
    // Window inputs are intermediate tensors: measure every tensor's type once, on the CPU.
    if shared.types.is_none() {
        let all: BTreeSet<String> = shared
            .units
            .iter()
            .flat_map(|(i, _)| {
                shared.topology.nodes[*i]
                    .outputs
                    .iter()
                    .filter(|o| !o.is_empty())
                    .cloned()
            })
            .collect();
        let probe = Probe {
            model: &shared.model,
            proto: &shared.proto,
            cpu: cpu_runtime(provisioner).ok(),
            sample: shared.input_files.first().map(|s| s.as_slice()).unwrap_or(&[]),
            free_dims: &shared.inputs.free_dims,
            dir: &executor.work().join("probe"),
            executor,
        };
        shared.types = Some(measure(&probe, &all).unwrap_or_default());
    }
    let steps = std::mem::take(&mut b.steps);
    let mut b = Bisector {
        types: shared.types.as_ref().unwrap_or(&empty),
        steps,
        ..b
    };
    bisect(&mut b, error)
}

fn unavailable(id: &str, reason: &str) -> Explanation {
    Explanation {
        target: id.to_string(),
        outcome: "unavailable".into(),
        full_model_error: None,
        trigger: None,
        window: vec![],
        fails_alone: None,
        window_error: None,
        steps: vec![],
        summary: format!("{id} cannot run here: {reason}"),
    }
}
