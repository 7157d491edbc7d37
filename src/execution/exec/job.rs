//! What the audit asks a worker process to do and what the worker answers, exchanged as JSON files
//! so that a worker that dies mid-way leaves nothing ambiguous behind.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::data::inputs::InputFile;
use crate::data::target::OptLevel;
use crate::data::tensor::DType;

/// ONNX Runtime's name for the QNN plugin EP: the one EP whose compiled contexts are cached.
pub const QNN_EP: &str = "QNNExecutionProvider";

/// How the worker attaches the target's execution provider.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EpSetup {
    /// CPU execution provider only, with its options (without the `CPUExecutionProvider.`
    /// prefix).
    Cpu { options: Vec<(String, String)> },
    /// A plugin EP library registered into the environment, then selected by its devices.
    Plugin {
        ep_name: String,
        library: PathBuf,
        /// Options without the `EPNAME.` prefix.
        options: Vec<(String, String)>,
        /// The plugin and core releases in words (package, version, library hash): part of the
        /// key of a cached compiled context, which is valid for these releases only.
        #[serde(default)]
        release: String,
        /// The compiled-context cache (`runtime::contexts`) this QNN session stores its context
        /// in and loads it from; `None`: compiled afresh, nothing stored (`--no-context-cache`,
        /// or an EP other than QNN).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context_cache: Option<PathBuf>,
    },
    /// An EP compiled into the ONNX Runtime build, appended through its C API.
    BuiltIn {
        ep_name: String,
        options: Vec<(String, String)>,
    },
}

/// A complete description of one target run.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Job {
    pub target_id: String,
    /// `libonnxruntime` to load.
    pub ort_library: PathBuf,
    pub ep: EpSetup,
    pub opt: OptLevel,
    pub model: PathBuf,
    /// Per sample, every model input.
    pub samples: Vec<Vec<InputFile>>,
    /// Where outputs go: `s{sample}/o{index}.npy`.
    pub output_dir: PathBuf,
    pub intra_threads: usize,
    /// Symbolic dimension values, passed as free dimension overrides (QNN needs static shapes).
    pub free_dims: Vec<(String, i64)>,
    /// Session configuration entries (`session.*` target options).
    pub session_config: Vec<(String, String)>,
    /// Record placement in detail: a verbose runtime log while the session is created (EPs say
    /// there why they reject nodes) and the graph as ONNX Runtime partitioned it.
    #[serde(default)]
    pub inspect_placement: bool,
    /// Create the session (the EP compiles its partitions) and run nothing.
    #[serde(default)]
    pub compile_only: bool,
    /// Runs of each sample with identical inputs; runs after the first are compared with it bit
    /// for bit (determinism), and only the first run's outputs are written.
    #[serde(default = "one")]
    pub repeat: usize,
    /// A stream: after the first sample, each of these inputs is the output of the previous
    /// sample (each sample is a step), as an app feeds a recurrent state back. Empty: samples
    /// are independent.
    #[serde(default)]
    pub feedback: Vec<Feedback>,
    /// The work directory (or its twin in shared memory) the job's outputs and the outputs it is
    /// fed live in, when the audit removes it at the end: a growing state is then written as what
    /// each step adds ([`crate::data::tensor::delta`]). `None` (`--keep-work`): every file whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_root: Option<PathBuf>,
    /// Environment variables the worker runs with that change what the runtime computes (oneDNN's
    /// instruction-set cap of `openvino,isa=...`); the same variables are removed from every
    /// other worker's environment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environment: Vec<(String, String)>,
    /// What the model is to the audit: only a model audited whole stores its compiled QNN
    /// context ([`ModelScope`]). The parent's decision, read by [`crate::execution::exec::Executor::prepared`]
    /// and never sent to the worker (the worker sees only whether `context_cache` is given).
    #[serde(skip)]
    pub scope: ModelScope,
    /// Run the session in the emulated ARM64 interpreter (`runtime::emulation`) instead of this
    /// binary: the emulation and qemu's `-cpu` value for the Arm core (`cortex-a710,sve=off`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emulated: Option<(crate::execution::runtime::emulation::Emulation, String)>,
}

/// What a job's model is to the audit, which decides whether its compiled QNN context is kept in
/// the store (`runtime::contexts`): a context is worth storing only when the same model is likely
/// to be compiled again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModelScope {
    /// A model the user audits whole: a model file named on the command line (a `matrix`
    /// variant, a pipeline stage, `eval`'s model), with its dimensions pinned: its context is
    /// stored and loaded by the next audit of it.
    #[default]
    Whole,
    /// A temporary model the audit cut or rewrote from one (a per-layer audit's tapped or
    /// isolated model, a bisection or `repro` window, an `explain-failure` probe, a fingerprint
    /// probe, a `matrix --search` candidate): compiled without storing, as its context would be
    /// used once.
    Part,
}

/// One output fed back as an input on the next step of a stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Feedback {
    pub output: String,
    pub input: String,
}

fn one() -> usize {
    1
}

impl Job {
    /// Makes every path absolute, so that the worker may change its working directory.
    pub fn absolutize(&mut self) -> std::io::Result<()> {
        let abs = |p: &mut PathBuf| -> std::io::Result<()> {
            *p = std::path::absolute(&*p)?;
            Ok(())
        };
        abs(&mut self.ort_library)?;
        abs(&mut self.model)?;
        abs(&mut self.output_dir)?;
        if let Some(root) = &mut self.delta_root {
            abs(root)?;
        }
        if let EpSetup::Plugin {
            library, context_cache, ..
        } = &mut self.ep
        {
            abs(library)?;
            if let Some(dir) = context_cache {
                abs(dir)?;
            }
        }
        for sample in &mut self.samples {
            for input in sample {
                abs(&mut input.path)?;
            }
        }
        Ok(())
    }
}

/// How far a worker got (in order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    LoadRuntime,
    RegisterEp,
    CreateSession,
    Run,
    WriteOutputs,
    Done,
}

/// One output tensor a worker wrote.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OutputFile {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub path: PathBuf,
}

/// What a worker reports back (written to `result.json` in its output directory).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobResult {
    /// `true` when every sample ran.
    pub ok: bool,
    pub phase: Phase,
    /// ONNX Runtime's own error text when `ok` is false.
    pub error: Option<String>,
    /// Version the loaded ONNX Runtime library states.
    pub ort_version: Option<String>,
    pub load_ms: f64,
    /// Registering a plugin EP library (0 for built-in EPs).
    #[serde(default)]
    pub register_ms: f64,
    pub session_create_ms: f64,
    /// Wall time of each `run` call, one per sample.
    pub run_ms: Vec<f64>,
    /// Reading the inputs and writing the outputs, over every sample.
    #[serde(default)]
    pub io_ms: f64,
    /// Per sample, every model output in session order.
    pub outputs: Vec<Vec<OutputFile>>,
    /// Execution-provider devices the runtime offered (`EP: vendor type`).
    pub devices: Vec<String>,
    /// Node placement as ONNX Runtime recorded it (empty when the runtime cannot say).
    #[serde(default)]
    pub placement: Vec<super::assignment::AssignedSubgraph>,
    /// Why placement could not be read, if it could not.
    #[serde(default)]
    pub placement_error: Option<String>,
    /// The graph ONNX Runtime partitioned, after its layout transformation (node names match
    /// `placement`); absent when the EP asked for no layout change or it was not requested.
    #[serde(default)]
    pub runtime_graph: Option<crate::data::model::topology::Topology>,
    /// Outputs of a repeated run that were not bit-identical to the sample's first run.
    #[serde(default)]
    pub repeat_differences: Vec<RepeatDifference>,
    /// Every graph output as the session declares it after ONNX Runtime's type and shape
    /// inference: how the per-layer audit learns the types of tensors it exposes untyped.
    #[serde(default)]
    pub output_types: Vec<OutputType>,
    /// The intra-op threads the session ran with.
    #[serde(default)]
    pub intra_threads: Option<usize>,
    /// The worker's peak resident memory in MiB, read as it wrote this result.
    #[serde(default)]
    pub peak_rss_mb: f64,
    /// For a QNN session: whether its compiled context was compiled, loaded from the cache or
    /// compiled again because the cached one was corrupt; `None` for other EPs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextUse>,
    /// Why a cached context was not used (a corrupt entry, a context ONNX Runtime refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_note: Option<String>,
}

/// How a QNN session got its compiled context (its HTP graphs), the compilation that takes
/// seconds per model on the simulator: what the report records so a reader knows which runs
/// compiled and which reused a cached context (bit-identical outputs either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContextUse {
    /// Compiled from the model, and the context stored in the cache (unless ONNX Runtime could
    /// not write it: the worker's `context_note` then says why).
    Compiled,
    /// Loaded from the cache (an entry verified against its SHA-256 manifest): not compiled.
    Loaded,
    /// The cached entry did not match its manifest (or ONNX Runtime refused it): removed,
    /// compiled afresh and stored again.
    Recompiled,
    /// Compiled from the model with the cache turned off (`--no-context-cache`,
    /// `NPU_AUDIT_CONTEXT_CACHE=0`), or for a temporary model the audit built from the one
    /// audited (a sub-model, a search's candidate): nothing loaded or stored.
    Uncached,
}

impl JobResult {
    /// Outputs that were stored rather than computed (a golden run's activations), in the shape
    /// of a completed run.
    pub fn stored(outputs: Vec<Vec<OutputFile>>) -> JobResult {
        JobResult {
            ok: true,
            phase: Phase::Done,
            outputs,
            ..JobResult::starting()
        }
    }

    /// A worker's result before anything ran: nothing measured, not ok.
    pub fn starting() -> JobResult {
        JobResult {
            ok: false,
            phase: Phase::LoadRuntime,
            error: None,
            ort_version: None,
            load_ms: 0.0,
            register_ms: 0.0,
            session_create_ms: 0.0,
            run_ms: Vec::new(),
            io_ms: 0.0,
            outputs: Vec::new(),
            devices: Vec::new(),
            placement: Vec::new(),
            placement_error: None,
            runtime_graph: None,
            repeat_differences: Vec::new(),
            output_types: Vec::new(),
            intra_threads: None,
            peak_rss_mb: 0.0,
            context: None,
            context_note: None,
        }
    }
}

/// A session output's inferred element type and shape (`-1` for a dimension inference left
/// open); `elem_type` is the ONNX data type code, 0 when the output is not a tensor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OutputType {
    pub name: String,
    pub elem_type: i32,
    pub shape: Vec<i64>,
}

/// One output of one repeated run that differed from the first run of the same sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RepeatDifference {
    /// The sample (0-based).
    pub sample: usize,
    /// The run (1-based after the first, which is run 0).
    pub run: usize,
    /// The output that differed.
    pub output: String,
    /// Elements whose bits differ (every element when the shapes differ).
    pub differing: u64,
    /// Elements of the output.
    pub elements: u64,
}
