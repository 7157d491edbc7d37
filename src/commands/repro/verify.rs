//! A bundle model run alone: on both sides with the bundle's inputs, judged as its window was
//! judged (the same outputs depart, or the target fails where the comparison runs), and with
//! its weights scrubbed; and the small helpers that lay its files out.

use std::path::Path;

use anyhow::Result;

use super::bundle::{file_name, scrub};
use super::windows::Evaluator;
use crate::analyses::layers::state::result_of;
use crate::data::inputs::InputFile;
use crate::data::model::pb::ModelProto;
use crate::data::model::rewrite::write_model;
use crate::data::tensor::npz_bytes;
use crate::data::tensor::Tensor;
use crate::execution::exec::{JobResult, Outcome};
use crate::report::repro::{BundleFile, EpNodes, OutputFigures, ScrubReport};

/// What running a bundle model alone showed.
pub(super) struct BundleRun {
    pub reproduces: bool,
    pub outputs: Vec<OutputFigures>,
    /// Per side (target, then comparison when it is a target): its outputs by name.
    pub tensors: Vec<Vec<(String, Tensor)>>,
    pub error: Option<String>,
    /// Where the target ran the model's nodes, grouped by execution provider.
    pub placement: Vec<EpNodes>,
}

/// The target's recorded assignment, nodes grouped by execution provider in order of first use.
fn placement(r: &JobResult) -> Vec<EpNodes> {
    let mut out: Vec<EpNodes> = Vec::new();
    for sub in &r.placement {
        let names = sub.nodes.iter().map(|n| n.name.clone());
        match out.iter_mut().find(|e| e.ep == sub.ep) {
            Some(e) => e.nodes.extend(names),
            None => out.push(EpNodes {
                ep: sub.ep.clone(),
                nodes: names.collect(),
            }),
        }
    }
    out
}

/// Runs a bundle model alone on both sides with the bundle's inputs and judges it as the window
/// was judged: the same outputs depart, or the target fails where the comparison runs.
pub(super) fn run_bundle(
    eval: &mut Evaluator<'_>,
    proto: &ModelProto,
    inputs: &[(String, Tensor)],
    sample: usize,
    outputs: &[String],
    dir: &Path,
) -> Result<BundleRun> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join("model.onnx");
    write_model(proto, eval.model, &path)?;
    let mut files = Vec::new();
    for (i, (name, t)) in inputs.iter().enumerate() {
        let p = dir.join(format!("in{i}.npy"));
        t.write_npy(&p)?;
        files.push(InputFile {
            name: name.clone(),
            path: p,
        });
    }
    let (target, against) = eval.run_model(&path, &[files], dir)?;
    judge_bundle(eval, &target, against.as_ref(), sample, outputs)
}

fn judge_bundle(
    eval: &Evaluator<'_>,
    target: &Outcome,
    against: Option<&Outcome>,
    sample: usize,
    outputs: &[String],
) -> Result<BundleRun> {
    let a = match against.map(result_of) {
        Some(Err(e)) => return Ok(failed(format!("the comparison cannot run the bundle ({e})"), false)),
        Some(Ok(a)) => Some(a),
        None => None,
    };
    let t = match result_of(target) {
        Ok(t) => t,
        Err(e) => return Ok(failed(e, true)),
    };
    let (figs, any) = eval.measure_outputs(outputs, sample, 0, t, a, &|n| n.to_string())?;
    let read = |r: &JobResult| -> Result<Vec<(String, Tensor)>> {
        r.outputs
            .first()
            .into_iter()
            .flatten()
            .map(|f| Ok((f.name.clone(), Tensor::read_npy(&f.path)?)))
            .collect()
    };
    let mut tensors = vec![read(t)?];
    if let Some(a) = a {
        tensors.push(read(a)?);
    }
    Ok(BundleRun {
        reproduces: any,
        outputs: figs,
        tensors,
        error: None,
        placement: placement(t),
    })
}

/// A bundle run that failed: a departure when only the target failed.
fn failed(error: String, target_fails: bool) -> BundleRun {
    BundleRun {
        reproduces: target_fails,
        outputs: Vec::new(),
        tensors: Vec::new(),
        error: Some(error),
        placement: Vec::new(),
    }
}

/// Tensors by name, in order.
pub(super) type Named = Vec<(String, Tensor)>;

/// The inputs a bundle carries (codes as fed) and their float twins, for one sample.
pub(super) fn bundle_inputs(eval: &Evaluator<'_>, inputs: &[String], sample: usize) -> Result<(Named, Named)> {
    let mut fed = Vec::new();
    let mut floats = Vec::new();
    for t in inputs {
        fed.push((t.clone(), eval.fed_tensor(sample, t)?));
        floats.push((t.clone(), eval.float_twin(sample, t)?));
    }
    Ok((fed, floats))
}

/// The files of a bundle as `(name, bytes)`, and each one's size and hash.
pub(super) fn listed(files: &[(String, Vec<u8>)]) -> Vec<BundleFile> {
    files
        .iter()
        .map(|(name, bytes)| BundleFile {
            name: name.clone(),
            bytes: bytes.len() as u64,
            sha256: crate::foundation::hash::sha256_hex(bytes),
        })
        .collect()
}

/// An npz archive of named tensors.
pub(super) fn npz(tensors: &[(String, Tensor)]) -> Result<Vec<u8>> {
    let named: Vec<(String, &Tensor)> = tensors.iter().map(|(n, t)| (n.clone(), t)).collect();
    npz_bytes(&named)
}

/// The scrubbed twin of a bundle model, run alone.
pub(super) fn scrubbed(
    eval: &mut Evaluator<'_>,
    proto: &ModelProto,
    seed: u64,
    inputs: &[(String, Tensor)],
    sample: usize,
    outputs: &[String],
    dir: &Path,
) -> Result<(ModelProto, ScrubReport, BundleRun)> {
    let (model, replaced) = scrub(proto, seed);
    eval.golden_applies = false;
    let run = run_bundle(eval, &model, inputs, sample, outputs, dir);
    eval.golden_applies = true;
    let run = run?;
    let report = ScrubReport {
        seed,
        replaced,
        reproduces: run.reproduces,
        outputs: run.outputs.clone(),
        note: None,
    };
    Ok((model, report, run))
}

/// The expected outputs of one side, as the bundle stores them.
pub(super) fn expected_name(id: &str) -> String {
    format!("expected/{}.npz", file_name(id))
}
