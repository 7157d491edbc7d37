//! `golden create`: the reference model run once on the CPU (graph optimizations off, one
//! thread) and stored with the inputs, the outputs and, with `--layers`, every float activation.

use std::path::PathBuf;

use anyhow::Result;

use super::analyze::golden_result;
use crate::data::inputs::{prepare, InputOptions};
use crate::data::model::{load_model, LoadedModel, Signature};
use crate::execution::exec::executor::{cpu_runtime, model_for_workers, reference_job};
use crate::execution::exec::{ExecOptions, Executor, OutputFile};
use crate::execution::golden::{self, GoldenWrite, RuntimeEntry};
use crate::execution::runtime::Provisioner;
use crate::foundation::hash::sha256_file;
use crate::foundation::userfile::{InputFiles, Reads};

/// Everything `golden create` was asked to do.
#[derive(Debug, Clone)]
pub struct GoldenOptions {
    pub model: PathBuf,
    pub out: PathBuf,
    pub force: bool,
    pub inputs: InputOptions,
    pub exec: ExecOptions,
    /// Also store every float activation of the reference (and a copy of the model).
    pub layers: bool,
}

impl Reads for GoldenOptions {
    fn declare(&self, set: &mut InputFiles) {
        let GoldenOptions {
            model,
            out: _,
            force: _,
            inputs,
            exec,
            layers: _,
        } = self;
        set.add(model).with(inputs).with(exec);
    }
}

/// The files a golden run reads, which its directory must not hold: replacing the directory
/// would delete them.
fn run_inputs(opts: &GoldenOptions, model: &LoadedModel) -> Vec<PathBuf> {
    let mut inputs = opts.reads().paths().to_vec();
    inputs.extend(model.external_data_paths());
    inputs
}

/// Runs the reference model once on the CPU and stores a golden directory.
pub fn run_golden_create(opts: &GoldenOptions) -> Result<PathBuf> {
    let model = load_model(&opts.model)?;
    let signature = Signature::of(&model)?;
    let inputs = prepare(&signature, &opts.inputs)?;
    golden::check_inputs_outside(&opts.out, &run_inputs(opts, &model))?;
    golden::check_destination(&opts.out, opts.force)?;
    let provisioner = Provisioner::new(&opts.exec.runtimes)?;
    let cpu = cpu_runtime(&provisioner)?;
    let executor = Executor::new(&opts.exec)?;
    executor.expect_model_bytes(model.total_bytes());
    let work = executor.work();
    let input_files = inputs.write(&work.join("inputs"))?;
    let mut notes = Vec::new();
    let model_path = if opts.layers {
        // Every tensor the graph computes becomes an output; the float ones are stored.
        let mut proto = model.proto.clone();
        crate::data::model::rewrite::pin_input_shapes(&mut proto, &inputs.shapes());
        let taps: Vec<String> = proto
            .graph
            .iter()
            .flat_map(|g| &g.node)
            .flat_map(|n| &n.output)
            .filter(|t| !t.is_empty())
            .cloned()
            .collect();
        let path = work.join("reference-tapped.onnx");
        crate::data::model::rewrite::write_model(&crate::analyses::layers::tap::tapped(&proto, &taps), &model, &path)?;
        path
    } else {
        model_for_workers(&model, &inputs, work, "reference.onnx", &mut notes)?
    };
    let job = reference_job(&cpu, model_path, &input_files, &work.join("golden"), &inputs.free_dims);
    let outcomes = executor.run(&[job])?;
    let outcome = &outcomes[0];
    let result = golden_result(outcome)?;
    crate::foundation::interrupt::check()?;
    // The model's own outputs, in its order (a tapped run returns more).
    let model_outputs: Vec<Vec<OutputFile>> = result
        .outputs
        .iter()
        .map(|sample| {
            signature
                .outputs
                .iter()
                .filter_map(|o| sample.iter().find(|f| f.name == o.name).cloned())
                .collect()
        })
        .collect();
    golden::write(
        &opts.out,
        GoldenWrite {
            reference: &model,
            runtime: RuntimeEntry {
                package: cpu.package.clone(),
                version: result
                    .ort_version
                    .clone()
                    .or(cpu.version.clone())
                    .unwrap_or_else(|| "unknown".into()),
                library_sha256: cpu.sha256.clone().or_else(|| sha256_file(&cpu.library).ok()),
                optimization: "disable".into(),
                intra_threads: crate::execution::exec::executor::GOLDEN_INTRA_OP_THREADS,
            },
            input_spec: serde_json::to_value(&inputs.provenance)?,
            inputs: &input_files,
            outputs: &model_outputs,
            activations: opts.layers.then_some(result.outputs.as_slice()),
        },
        opts.force,
    )?;
    for n in notes {
        crate::foundation::console::note(n);
    }
    Ok(opts.out.clone())
}
