//! Placement of every target of an audit: analysed from what its worker recorded; when crossing tensors have
//! no declared size, one CPU probe run of the model reports their shapes and the analysis is
//! repeated with them.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use anyhow::Result;

use super::{analyze, Analysis, Recorded, TensorSize};
use crate::data::inputs::InputFile;
use crate::data::model::pb::ModelProto;
use crate::data::model::rewrite::write_model;
use crate::data::model::slice::{value_info, MeasuredType};
use crate::data::model::topology::{DeclaredType, Topology};
use crate::data::model::LoadedModel;
use crate::data::target::OptLevel;
use crate::execution::exec::{EpSetup, Executor, Job, Outcome, PlannedTarget};
use crate::execution::runtime::Runtime;
use crate::report::compare::PlacementSummary;

/// Models above this size are not dumped by the runtime for placement inspection: the dump
/// holds a copy of every weight, and protobuf cannot hold more than 2 GiB.
pub const INSPECT_LIMIT_BYTES: u64 = 1 << 30;

/// The audited model's topology with graph inputs typed at the shapes fed.
pub fn model_topology(proto: &ModelProto, input_shapes: &HashMap<String, (i32, Vec<usize>)>) -> Topology {
    let mut t = Topology::of_model(proto);
    for (name, (elem_type, shape)) in input_shapes {
        t.declared.insert(
            name.clone(),
            DeclaredType {
                elem_type: *elem_type,
                shape: Some(shape.iter().map(|&d| d as u64).collect()),
            },
        );
    }
    t
}

/// What a probe needs: the model to extend, the CPU runtime, the first sample and where to work.
pub struct Probe<'a> {
    pub model: &'a LoadedModel,
    pub proto: &'a ModelProto,
    pub cpu: Option<Runtime>,
    pub sample: &'a [InputFile],
    pub free_dims: &'a [(String, i64)],
    pub dir: &'a Path,
    pub executor: &'a Executor,
}

/// The placement of every planned target (`job_of[i]` is target i's outcome), and a note when
/// some crossing sizes stay unknown.
pub fn placements(
    planned: &[PlannedTarget],
    job_of: &[Option<usize>],
    outcomes: &[Outcome],
    model: &Topology,
    probe: &Probe<'_>,
) -> (Vec<Option<PlacementSummary>>, Vec<String>) {
    let logs: Vec<String> = planned
        .iter()
        .zip(job_of)
        .map(|(_, j)| {
            j.map(|j| std::fs::read_to_string(&outcomes[j].log).unwrap_or_default())
                .unwrap_or_default()
        })
        .collect();
    let run = |probed: &HashMap<String, TensorSize>| -> Vec<Option<Analysis>> {
        planned
            .iter()
            .zip(job_of)
            .zip(&logs)
            .map(|((t, j), log)| {
                let result = outcomes[(*j)?].result.as_ref()?;
                let rec = Recorded {
                    target_ep: t.spec.backend.ep_name(),
                    assignment: &result.placement,
                    runtime_graph: result.runtime_graph.as_ref(),
                    log,
                };
                analyze(&rec, model, probed)
            })
            .collect()
    };
    let mut notes = Vec::new();
    let mut analyses = run(&HashMap::new());
    let missing: BTreeSet<String> = analyses
        .iter()
        .flatten()
        .flat_map(|a| a.missing_sizes.iter().cloned())
        .collect();
    if !missing.is_empty() {
        match measure(probe, &missing) {
            Ok(measured) => {
                let probed: HashMap<String, TensorSize> = measured
                    .into_iter()
                    .map(|(k, m)| {
                        let elements = m.shape.iter().map(|&d| d as u64).product();
                        (
                            k,
                            TensorSize {
                                elem_type: m.elem_type,
                                elements,
                            },
                        )
                    })
                    .collect();
                analyses = run(&probed);
            }
            Err(e) => notes.push(format!(
                "crossing sizes: the probe run that measures {} intermediate tensor(s) failed: {}",
                missing.len(),
                crate::foundation::error::one_line(&e)
            )),
        }
    }
    let summaries = analyses.into_iter().map(|a| a.map(|a| a.summary)).collect();
    (summaries, notes)
}

/// Runs the model once on the CPU EP (no graph optimization) with `tensors` as extra outputs
/// and returns their element types and shapes.
pub fn measure(probe: &Probe<'_>, tensors: &BTreeSet<String>) -> Result<HashMap<String, MeasuredType>> {
    let cpu = probe.cpu.clone().ok_or_else(|| anyhow::anyhow!("no CPU runtime"))?;
    let mut proto = probe.proto.clone();
    if let Some(g) = proto.graph.as_mut() {
        for t in tensors {
            g.output.push(value_info(t, None));
        }
    }
    std::fs::create_dir_all(probe.dir)?;
    let path = probe.dir.join("probe.onnx");
    write_model(&proto, probe.model, &path)?;
    let job = Job {
        target_id: "probe".into(),
        ort_library: cpu.library.clone(),
        ep: EpSetup::Cpu { options: vec![] },
        opt: OptLevel::Disable,
        model: path,
        samples: vec![probe.sample.to_vec()],
        output_dir: probe.dir.join("out"),
        intra_threads: 1,
        free_dims: probe.free_dims.to_vec(),
        session_config: vec![],
        inspect_placement: false,
        compile_only: false,
        repeat: 1,
        feedback: Vec::new(),
        delta_root: None,
        environment: Vec::new(),
        scope: crate::execution::exec::job::ModelScope::Whole,
        emulated: None,
    };
    let outcomes = probe.executor.run(&[(job, probe.dir.to_path_buf())])?;
    let outcome = &outcomes[0];
    let result = outcome
        .result
        .as_ref()
        .filter(|r| r.ok)
        .ok_or_else(|| anyhow::anyhow!("{}", outcome.error.clone().unwrap_or_else(|| "no result".into())))?;
    let mut sizes = HashMap::new();
    for f in result.outputs.first().into_iter().flatten() {
        if tensors.contains(&f.name) {
            sizes.insert(
                f.name.clone(),
                MeasuredType {
                    elem_type: f.dtype.onnx_code(),
                    shape: f.shape.clone(),
                },
            );
        }
        // The probe's outputs are only needed for their headers.
        let _ = std::fs::remove_file(&f.path);
    }
    Ok(sizes)
}
