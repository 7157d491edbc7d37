//! Command-line interface (clap derive). Parsing only: every command calls into the library.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::analyses::metrics::ClassAxisFlag;
use crate::analyses::metrics::Decision;
use crate::analyses::stream::Feeds;
use crate::commands::matrix::Variant;
use crate::commands::merge::ShardOutputs;
use crate::commands::shard::{Costs, ShardFlag};
use crate::data::inputs::sequence::ChunkSpec;
use crate::data::inputs::{GenChoice, NamedFile, ShapePin};
use crate::data::target::{TargetList, TargetPattern};
use crate::execution::runtime::provision::RuntimeOverride;
use crate::foundation::pattern::Pattern;

/// Audit cross-device accuracy drift of quantized ONNX models: run one model through several
/// execution providers on identical inputs and diff every output against an fp32 golden run.
#[derive(Debug, Parser)]
#[command(name = "npu-audit", version, about, long_about = None, after_help = EXIT_CODES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub global: GlobalArgs,
}

/// Options every command takes.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Global")]
pub struct GlobalArgs {
    /// Colour on the terminal: auto (on a terminal, unless NO_COLOR is set), always, never.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto, global = true)]
    pub color: ColorChoice,
    /// Only errors on stderr: no progress, no notes.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// More on stderr: each session as it ends, where each runtime was found.
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// Where runtimes and fingerprints are cached (default: the user's cache directory).
    #[arg(long = "cache-dir", value_name = "DIR", env = "NPU_AUDIT_CACHE", global = true)]
    pub cache_dir: Option<PathBuf>,
    /// The Python interpreter that fetches ONNX Runtime wheels (default: python3, else python).
    #[arg(long, value_name = "PATH", env = "NPU_AUDIT_PYTHON", global = true)]
    pub python: Option<String>,
}

/// When to colour the terminal output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

/// Exit codes, printed in `--help`.
pub const EXIT_CODES: &str = "Exit codes: 0 success; 1 drift threshold exceeded; 2 usage or input error; \
3 a required target did not run (failed, crashed, timeout, unavailable); 4 environment error (no runtime, golden run \
crashed); 130 interrupted";

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a model on several targets and compare every output with the golden run.
    Compare(Box<CompareArgs>),
    /// Per-layer drift: `compare` with every layer (or the selected ones) tapped, run alone on
    /// golden inputs, and compared with the golden run and the baseline.
    Layers(Box<CompareArgs>),
    /// Find the node that makes a target refuse a model: compile sub-models of the graph and
    /// report the shortest failing prefix and window, per target.
    #[command(name = "explain-failure")]
    ExplainFailure(ExplainArgs),
    /// Measure each target's arithmetic with generated probe models: rounding mode per op family,
    /// saturation, nonlinear-function accuracy, float precision and accumulation, determinism.
    Fingerprint(FingerprintArgs),
    /// Triage device reports (outputs users' devices sent in): reproduce each here, say whether
    /// the chipset, a silent CPU fallback, another chipset, rounding or the device explains it,
    /// and over a fleet whether the quantization, the NPU or single devices are to blame.
    Triage(Box<TriageArgs>),
    /// What to ship where: every model variant on every target, the cheapest variant that meets
    /// the policy per target (a dispatch table), and mixed-precision fixes proven by re-audit.
    Matrix(Box<MatrixArgs>),
    /// Task accuracy on a labelled set, or a generation spec decoded token by token.
    ///
    /// docs/eval.md, docs/generation.md. A model: intervals, paired drops against the reference and the baseline, McNemar,
    /// non-inferiority, what flipped. A generation spec (a speech recognizer, an LLM) decodes on
    /// every target with its own tokens and takes its own flags: npu-audit eval SPEC.toml --help.
    Eval(Box<EvalArgs>),
    /// The smallest piece of the model that shows a target's departure, cut out as a standalone
    /// bundle a vendor runs without npu-audit (model, inputs, expected outputs, run.py;
    /// docs/repro.md).
    Repro(Box<ReproArgs>),
    /// Audit a chain of models end to end per target (outputs of one feed inputs of the next),
    /// and attribute the final output's drift to the stage it comes from (docs/streams.md).
    Pipeline(Box<PipelineArgs>),
    /// List the targets this machine can and cannot run.
    Targets(TargetsArgs),
    /// Manage the ONNX Runtime builds the audit loads.
    #[command(subcommand)]
    Runtime(RuntimeCommand),
    /// Stored golden runs.
    #[command(subcommand)]
    Golden(GoldenCommand),
    /// Check a policy file (npu-audit.toml) and print the limits each target gets.
    #[command(name = "check-config")]
    CheckConfig(CheckConfigArgs),
    /// Join the reports of `compare --shard i/n` jobs into one report and one verdict, or the
    /// files of `eval --shard i/n` jobs into the eval's report.
    Merge(MergeArgs),
    /// How many samples an eval needs to show a drop within a limit, at expected flip rates or at
    /// those an earlier eval observed, before hours of simulation are spent (docs/eval.md).
    #[command(name = "sample-size")]
    SampleSize(SampleSizeArgs),
    /// Split an eval or a compare into N cluster jobs of even cost and print their definitions:
    /// a table, a GitHub matrix (JSON or a workflow), a Slurm array script or a Kubernetes
    /// Indexed Job (docs/scale.md).
    Plan(PlanArgs),
    /// Render a saved JSON report of any command again: terminal, Markdown, JUnit, HTML, ...
    ///
    /// The report's kind (compare, eval, generation, triage, matrix, pipeline, repro) is read
    /// from the JSON; each is written in the forms its command writes: --junit and --node-data
    /// for compare reports, --html for compare, eval, generation, triage and matrix, --dispatch
    /// for a matrix.
    Render(RenderArgs),
    /// JSON Schema: report (default), eval, generation, triage, matrix, pipeline, repro.
    ///
    /// Derived from the types the tool writes: `report` is the JSON of `compare`, `layers` and
    /// `merge`; `generation` that of `eval SPEC.toml`; `triage`, `matrix`, `pipeline`, `eval` and
    /// `repro` that of the command of the name. Each is published as docs/KIND.schema.json.
    Schema {
        /// Which output's schema.
        #[arg(value_enum, default_value_t = SchemaKind::Report)]
        kind: SchemaKind,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), or write one page per command into DIR.
    Man {
        /// Write `npu-audit.1` and `npu-audit-COMMAND.1` for every command into this directory.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Internal: run one target in this process (used by the audit's worker processes).
    #[command(name = "__worker", hide = true)]
    Worker {
        job: PathBuf,
        /// Serve samples over standard input and output (one warm session for a whole set).
        #[arg(long)]
        serve: bool,
    },
}

/// The outputs with a published JSON Schema (`docs/KIND.schema.json`, one per variant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SchemaKind {
    /// The JSON report of `compare`, `layers` and `merge`.
    Report,
    /// The JSON of `triage`.
    Triage,
    /// The JSON of `matrix`.
    Matrix,
    /// The JSON of `pipeline`.
    Pipeline,
    /// The JSON of `eval`.
    Eval,
    /// The JSON of `repro`.
    Repro,
    /// The JSON of `eval --task transcribe|generate` on a generation spec.
    Generation,
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

/// Format of a compare report on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    Table,
    Json,
    /// For a pull-request comment or a CI step summary.
    Markdown,
}

/// Files a compare report is written to, each atomically and only once everything rendered.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Reports")]
pub struct ReportFiles {
    /// Write the JSON report to FILE (`-`: stdout).
    ///
    /// `-` writes it instead of the --format report.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Write a Markdown summary (`-`: stdout).
    ///
    /// For a pull-request comment or $GITHUB_STEP_SUMMARY.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Write JUnit XML: one test case per rule per target (`-`: stdout).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Write one self-contained HTML file with plots (`-`: stdout).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Write per-node drift for Google's Model Explorer, one node-data file per target, into DIR.
    #[arg(long = "node-data", value_name = "DIR")]
    pub node_data: Option<PathBuf>,
}

/// Flags of `check-config`.
#[derive(Debug, Args)]
pub struct CheckConfigArgs {
    /// The policy file (`-`: stdin). Default: NPU_AUDIT_CONFIG, else npu-audit.toml in the
    /// current directory or the nearest parent, up to the repository's root.
    #[arg(env = "NPU_AUDIT_CONFIG")]
    pub file: Option<PathBuf>,
    /// Show the limits these targets get (default: the file's `targets`, else every known one).
    #[arg(long = "target", short = 't', value_name = "TARGET", value_parser = TargetList::parse)]
    pub targets: Vec<TargetList>,
}

/// Flags of `sample-size`: the limit, and the flip rates (expected, or an earlier eval's).
#[derive(Debug, Args)]
pub struct SampleSizeArgs {
    /// The drop limit in points of accuracy (as eval's --max-accuracy-drop).
    #[arg(long = "max-accuracy-drop", value_name = "POINTS")]
    pub max_accuracy_drop: f64,
    /// Expected share of samples whose correctness flips against the reference, in percent,
    /// half broken and half fixed unless --drop says otherwise.
    #[arg(long, value_name = "PERCENT", conflicts_with_all = ["broken", "from"])]
    pub flip_rate: Option<f64>,
    /// With --flip-rate: the expected drop in points (broken minus fixed); default 0.
    #[arg(long, value_name = "POINTS", requires = "flip_rate", allow_hyphen_values = true)]
    pub drop: Option<f64>,
    /// Expected share of samples the target breaks, in percent (with --fixed).
    #[arg(long, value_name = "PERCENT", requires = "fixed", conflicts_with = "from")]
    pub broken: Option<f64>,
    /// Expected share of samples the target fixes, in percent (with --broken).
    #[arg(long, value_name = "PERCENT", requires = "broken")]
    pub fixed: Option<f64>,
    /// Take each target's flip rates (and its time per sample) from an earlier eval's JSON.
    #[arg(long, value_name = "EVAL.json")]
    pub from: Option<PathBuf>,
    /// The probability of showing the limit to size for (besides even odds).
    #[arg(long, value_name = "P", default_value_t = 0.8)]
    pub power: f64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Flags of `plan`: how many jobs, what to print, where the costs come from, and the command.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// How many jobs (shards) to split the work into, 1 to 10000.
    #[arg(long, value_name = "N")]
    pub shards: u64,
    /// What to print: the split (table), a GitHub matrix (json), a workflow (github), an sbatch
    /// array script (slurm) or a Kubernetes Indexed Job (k8s).
    #[arg(long, value_enum, default_value_t = PlanFormat::Table)]
    pub format: PlanFormat,
    /// A previous eval's JSON report: each target's median time per sample is its cost
    /// (default: a cost per backend, docs/scale.md).
    #[arg(long, value_name = "EVAL_REPORT.json")]
    pub costs_from: Option<PathBuf>,
    /// CPUs each job asks for, instead of the estimate (the workers one job runs at once,
    /// docs/scale.md "Resources").
    #[arg(long, value_name = "N", value_parser = crate::commands::shard::limits::parse_cpus)]
    pub cpus: Option<u32>,
    /// Memory each job asks for, as Slurm writes it (4G, 4096M, 4096), instead of the estimate
    /// from the models' sizes and the backends.
    #[arg(long, value_name = "SIZE", value_parser = crate::commands::shard::limits::parse_mem)]
    pub mem: Option<u64>,
    /// Time limit of each job, as Slurm writes it (MINUTES, HH:MM:SS, D-HH:MM:SS), instead of
    /// the estimate from the costs (setup + 2 x the costliest shard's samples).
    #[arg(long, value_name = "TIME", value_parser = crate::commands::shard::limits::parse_time)]
    pub time: Option<u64>,
    /// The command every job runs, after `--`: `eval MODEL --dataset D ...` or `compare MODEL ...`
    /// (without --shard and --out, which each job gets).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// What `plan` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlanFormat {
    /// Each shard's units and share of the cost, and every job's command.
    Table,
    /// A GitHub Actions matrix (`{"include": [...]}`) with every job's command.
    Json,
    /// A GitHub Actions workflow: a matrix job per shard and a merge job.
    Github,
    /// An sbatch script of a job array with its CPUs, memory and time, and the merge as a job
    /// that waits for it.
    Slurm,
    /// A Kubernetes Indexed Job manifest.
    K8s,
}

/// Flags of `merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The shard reports (`compare --shard i/n --out FILE`) or eval shards' files (`eval --shard
    /// i/n --out FILE`), one per shard.
    #[arg(required = true, num_args = 1..)]
    pub reports: Vec<PathBuf>,
    /// Where a shard's saved outputs are when they are not beside its report (default: the
    /// directory the report names, beside it).
    #[arg(long = "outputs", value_name = "REPORT=DIR", value_parser = ShardOutputs::parse)]
    pub outputs: Vec<ShardOutputs>,
    /// Merge shards whose sessions ran with other intra-op thread counts.
    #[arg(long)]
    pub allow_other_threads: bool,
    /// Merge shards made on hosts of other instruction-set classes, although targets whose
    /// figures depend on the host (OpenVINO, the CPU EP) may differ for that reason alone.
    #[arg(long)]
    pub allow_other_hosts: bool,
    /// Report format on stdout.
    #[arg(long, value_enum, default_value_t = ReportFormat::Table)]
    pub format: ReportFormat,
    #[command(flatten)]
    pub files: ReportFiles,
}

/// Flags of `render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// A JSON report of compare, layers, merge, eval (a generation spec's too), triage, matrix,
    /// pipeline or repro (`-`: stdin).
    pub report: PathBuf,
    /// Report format on stdout.
    #[arg(long, value_enum, default_value_t = ReportFormat::Table)]
    pub format: ReportFormat,
    #[command(flatten)]
    pub files: ReportFiles,
    /// Write a matrix report's dispatch table (target -> model file, EP, options) as JSON.
    #[arg(long, value_name = "FILE", help_heading = "Reports")]
    pub dispatch: Option<PathBuf>,
}

/// Whether `compare` shows fingerprints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FingerprintChoice {
    Auto,
    Cached,
    Off,
}

/// Flags that choose the inputs.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Inputs")]
pub struct InputArgs {
    /// Inputs as an .npz archive (repeatable; `-`: stdin).
    ///
    /// One sample per file.
    #[arg(long = "inputs", value_name = "FILE.npz")]
    pub npz: Vec<PathBuf>,
    /// One input as an .npy file (repeatable).
    #[arg(long = "input", value_name = "NAME=FILE.npy", value_parser = NamedFile::parse)]
    pub npy: Vec<NamedFile>,
    /// Generated inputs: zeros, ones, uniform:LO,HI or normal:M,S.
    ///
    /// normal:M,S has mean M and standard deviation S. NAME=SPEC generates one input (the others
    /// come from the files or their own --gen).
    #[arg(long = "gen", value_name = "SPEC", value_parser = GenChoice::parse)]
    pub gen: Vec<GenChoice>,
    /// Seed of the generator (docs/inputs.md).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Number of generated samples.
    #[arg(long, default_value_t = 1, allow_hyphen_values = true, value_parser = clap::value_parser!(u64).range(1..=100000))]
    pub samples: u64,
    /// Pin an input's shape, e.g. image:1,3,224,224.
    ///
    /// Its dynamic dimensions take these values.
    #[arg(long = "input-shape", value_name = "NAME:D0,D1,...", value_parser = ShapePin::parse)]
    pub shapes: Vec<ShapePin>,
}

/// Flags that control the worker processes.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Execution")]
pub struct ExecArgs {
    /// Seconds a target may take before it is killed.
    ///
    /// Session creation and every sample count.
    #[arg(long, default_value_t = 900.0, value_name = "SECONDS", allow_hyphen_values = true)]
    pub timeout: f64,
    /// Targets run at once (default: the number of cores).
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// Intra-op threads of every session (default 1).
    ///
    /// 1 whatever the machine: some CPU kernels, such as an LSTM's, give other bits with other
    /// thread counts; the report records it.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Use this ONNX Runtime library (or directory) for a build: cpu, qnn, openvino, directml, gpu.
    #[arg(long = "runtime", value_name = "KEY=PATH", value_parser = RuntimeOverride::parse)]
    pub runtime: Vec<RuntimeOverride>,
    #[command(flatten)]
    pub runtime_env: RuntimeEnv,
    /// Keep the work directory (inputs, outputs and each worker's log) and print its path.
    #[arg(long)]
    pub keep_work: bool,
    /// Compile every QNN session afresh: neither load nor store compiled contexts in the cache
    /// (`qnn-contexts` in the runtime cache, or NPU_AUDIT_CONTEXT_DIR).
    #[arg(long, hide_short_help = true)]
    pub no_context_cache: bool,
    /// Whether QNN sessions reuse compiled contexts from the cache (0 turns it off, as
    /// --no-context-cache does).
    #[arg(
        long = "context-cache",
        env = "NPU_AUDIT_CONTEXT_CACHE",
        value_name = "0|1",
        default_value = "1",
        action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new(),
        hide_possible_values = true,
        hide_short_help = true
    )]
    pub context_cache: bool,
}

/// An ONNX Runtime build given by its environment variable (or the equivalent flag).
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Execution")]
pub struct RuntimeEnv {
    /// The ONNX Runtime library (or directory) of the `cpu` build.
    #[arg(
        long = "runtime-cpu",
        value_name = "PATH",
        env = "NPU_AUDIT_RUNTIME_CPU",
        hide_short_help = true
    )]
    pub cpu: Option<PathBuf>,
    /// The QNN plugin library (or directory) of the `qnn` build.
    #[arg(
        long = "runtime-qnn",
        value_name = "PATH",
        env = "NPU_AUDIT_RUNTIME_QNN",
        hide_short_help = true
    )]
    pub qnn: Option<PathBuf>,
    /// The ONNX Runtime library (or directory) of the `openvino` build.
    #[arg(
        long = "runtime-openvino",
        value_name = "PATH",
        env = "NPU_AUDIT_RUNTIME_OPENVINO",
        hide_short_help = true
    )]
    pub openvino: Option<PathBuf>,
    /// The ONNX Runtime library (or directory) of the `directml` build.
    #[arg(
        long = "runtime-directml",
        value_name = "PATH",
        env = "NPU_AUDIT_RUNTIME_DIRECTML",
        hide_short_help = true
    )]
    pub directml: Option<PathBuf>,
    /// The ONNX Runtime library (or directory) of the `gpu` build.
    #[arg(
        long = "runtime-gpu",
        value_name = "PATH",
        env = "NPU_AUDIT_RUNTIME_GPU",
        hide_short_help = true
    )]
    pub gpu: Option<PathBuf>,
}

impl RuntimeEnv {
    /// The builds given, as (key, path).
    pub fn given(&self) -> Vec<(&'static str, PathBuf)> {
        [
            ("cpu", &self.cpu),
            ("qnn", &self.qnn),
            ("openvino", &self.openvino),
            ("directml", &self.directml),
            ("gpu", &self.gpu),
        ]
        .into_iter()
        .filter_map(|(k, p)| p.clone().filter(|p| !p.as_os_str().is_empty()).map(|p| (k, p)))
        .collect()
    }
}

/// Flags of `compare` (and `layers`, which shares them).
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The quantized ONNX model to audit.
    pub model: PathBuf,
    #[command(flatten)]
    pub reference: ReferenceArgs,
    #[command(flatten)]
    pub targets: TargetArgs,
    #[command(flatten)]
    pub inputs: InputArgs,
    #[command(flatten)]
    pub gate: GateArgs,
    #[command(flatten)]
    pub reports: ReportArgs,
    #[command(flatten)]
    pub layers: LayerArgs,
    #[command(flatten)]
    pub stream: StreamArgs,
    #[command(flatten)]
    pub exec: ExecArgs,
}

/// A stateful model run as a stream: every sample is a step, some outputs fed back as the next
/// step's inputs, in every target's worker and in the golden run alike (docs/streams.md).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Stream")]
pub struct StreamArgs {
    /// Run the samples as the steps of one stream, feeding each OUTPUT back as INPUT on the
    /// next step (comma-separated pairs); the fed inputs start as zeros unless a file gives them.
    #[arg(long, value_name = "OUTPUT->INPUT,...", value_parser = Feeds::parse)]
    pub stream: Option<Feeds>,
    /// Steps of the stream (default: every window or step the files hold; 1 with generators).
    #[arg(long, value_name = "N", requires = "stream", value_parser = clap::value_parser!(u64).range(1..=100000))]
    pub steps: Option<u64>,
    /// A fresh input per step cut from a long array along its last axis, one window of the
    /// input's last dimension every H samples (default: the window); with H shorter than the
    /// window, the array is left-padded with window-H zeros so each window carries context.
    #[arg(long, value_name = "NAME=FILE.npy[:hop=H]", requires = "stream", value_parser = ChunkSpec::parse)]
    pub chunk: Vec<ChunkSpec>,
    /// Every step's inputs: each member holds one input stacked over the steps on axis 0.
    #[arg(long, value_name = "FILE.npz", requires = "stream")]
    pub sequence: Option<PathBuf>,
    /// A step's decision, OUTPUT>THRESHOLD or OUTPUT<THRESHOLD (repeatable); default: each
    /// output's top-1 class.
    ///
    /// The default decides on the outputs with a class axis only.
    #[arg(long, value_name = "OUTPUT>THRESHOLD", requires = "stream", value_parser = Decision::parse_threshold)]
    pub decision: Vec<Decision>,
    /// The state has diverged at the first step where a fed-back output's SQNR against the
    /// golden stream is below DB.
    #[arg(
        long = "divergence-sqnr",
        value_name = "DB",
        requires = "stream",
        allow_hyphen_values = true
    )]
    pub divergence_sqnr: Option<f64>,
    /// Also run every target with the golden state fed at each step: the error one step
    /// introduces, apart from what the loop accumulates.
    #[arg(long = "teacher-forcing", requires = "stream")]
    pub teacher_forcing: bool,
}

/// Where the golden run comes from.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Reference")]
pub struct ReferenceArgs {
    /// The fp32 model whose CPU run is the golden run.
    ///
    /// Default: derived from MODEL, e.g. `m_qdq_u8.onnx` -> `m_fp32.onnx` (`matrix`, which has
    /// no MODEL, needs it or --golden). With --golden, it is checked to be the golden run's
    /// model.
    #[arg(long)]
    pub reference: Option<PathBuf>,
    /// A stored golden run to compare against (`npu-audit golden create`).
    #[arg(long = "golden", value_name = "DIR")]
    pub golden_dir: Option<PathBuf>,
    /// With --golden and --reference: compare even when the reference is not the model the
    /// golden run was made with (said in the report's notes).
    #[arg(long, requires = "golden_dir")]
    pub allow_golden_mismatch: bool,
}

/// Which targets run, and what is measured on them besides the outputs.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Targets")]
pub struct TargetArgs {
    /// Target (repeatable; default: all this machine runs but cpu-arm64).
    ///
    /// cpu, cpu:noopt, qnn:<chipset>, openvino, dml, cuda, tensorrt, cpu-arm64:<core>
    /// (cortex-a76, neoverse-n1, cortex-a710-nosve, cortex-a710, neoverse-n2, neoverse-v1: the
    /// phone's CPU, emulated).
    ///
    /// A release after @, extra options as ,key=value; `npu-audit targets` lists every target,
    /// each emulated core with its class of kernels, the chipsets it stands for and its first
    /// use's cost.
    #[arg(long = "target", short = 't', value_name = "TARGET", value_parser = TargetList::parse)]
    pub targets: Vec<TargetList>,
    /// Targets whose failure does not fail the audit (id, prefix*, or all).
    #[arg(long = "allow-failure", value_name = "PATTERN", value_parser = TargetPattern::parse)]
    pub allow_failure: Vec<TargetPattern>,
    /// Do not add the cpu:noopt baseline (the reference integer implementation).
    #[arg(long)]
    pub no_baseline: bool,
    /// Class axis for top-k agreement: AXIS, none, OUTPUT=AXIS or OUTPUT=none.
    #[arg(long = "class-axis", value_name = "AXIS", value_parser = ClassAxisFlag::parse)]
    pub class_axis: Vec<ClassAxisFlag>,
    /// Run every sample N times on every target and report targets whose outputs are not
    /// bit-identical across the runs; with N > 1, also run each target once with
    /// --thread-probe threads and report outputs that depend on the thread count.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub repeat: u64,
    /// Intra-op threads of the thread-sensitivity run that --repeat adds.
    #[arg(long = "thread-probe", default_value_t = 4, value_name = "N", value_parser = clap::value_parser!(u64).range(2..=64))]
    pub thread_probe: u64,
    /// Accept shards or a previous report made with other intra-op thread counts.
    ///
    /// Merge shards, or compare against a previous report, made with other intra-op thread
    /// counts (their figures may differ for that reason alone).
    #[arg(long)]
    pub allow_other_threads: bool,
    /// Accept a previous report made on a host of another instruction-set class.
    ///
    /// Compare against it although targets whose figures depend on the host may differ for
    /// that reason alone.
    #[arg(long)]
    pub allow_other_hosts: bool,
    /// Each target's arithmetic fingerprint in its row, and the reading of its drift: auto
    /// (cached, measured when missing), cached (only what `npu-audit fingerprint` cached), off.
    #[arg(long, value_enum, default_value_t = FingerprintChoice::Auto)]
    pub fingerprint: FingerprintChoice,
}

/// The release gate: limits from flags and from the policy file.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Gate")]
pub struct GateArgs {
    /// Fail (exit 1) when any output of any target is below this SQNR in dB.
    #[arg(long, value_name = "DB", allow_hyphen_values = true)]
    pub min_sqnr: Option<f64>,
    /// Fail (exit 1) when any output of any target has a larger absolute error.
    #[arg(long, value_name = "X", allow_hyphen_values = true)]
    pub max_abs: Option<f64>,
    /// Fail (exit 1) when any output with a class axis agrees with the golden run's top-1 class
    /// on fewer than this fraction of rows (0 to 1).
    #[arg(long = "min-top1", value_name = "FRACTION")]
    pub min_top1: Option<f64>,
    /// Fail (exit 1) unless every output of every target matches the golden run bit for bit.
    #[arg(long)]
    pub require_bit_exact: bool,
    /// Fail (exit 1) when a non-CPU target leaves more than N compute nodes to the CPU EP
    /// (graph-boundary Q/DQ, shape arithmetic and nodes the runtime inserted do not count).
    #[arg(long, value_name = "N")]
    pub max_fallback_nodes: Option<usize>,
    /// Fail (exit 1) when a non-CPU target's EP compiles the graph into more than N partitions.
    #[arg(long, value_name = "N")]
    pub max_partitions: Option<usize>,
    /// Fail (exit 1) when any compute node of a non-CPU target falls back to the CPU EP.
    #[arg(long)]
    pub fail_on_fallback: bool,
    /// Fail (exit 1) when a layer's SQNR against the golden run is more than DB below the
    /// baseline's on the same layer (needs --layers; the summary's SQNR-loss level).
    #[arg(long = "max-layer-sqnr-loss", value_name = "DB")]
    pub max_layer_sqnr_loss: Option<f64>,
    /// Fail (exit 1) when a stream's decisions agree with the golden stream's on fewer than
    /// this fraction of steps (needs --stream).
    #[arg(long = "min-decision-agreement", value_name = "FRACTION")]
    pub min_decision_agreement: Option<f64>,
    /// Fail (exit 1) when a stream's state diverges (falls below --divergence-sqnr) at step N
    /// or before (needs --stream).
    #[arg(long = "max-divergence-step", value_name = "N")]
    pub max_divergence_step: Option<usize>,
    /// The release policy file (limits per target, group and output; `-`: stdin).
    ///
    /// Limits per target, group and output, targets allowed to fail, baseline mode. Default:
    /// npu-audit.toml in the current directory or the nearest parent up to the repository's
    /// root; flags override it.
    #[arg(long, value_name = "FILE", env = "NPU_AUDIT_CONFIG")]
    pub config: Option<PathBuf>,
    /// Read no policy file.
    #[arg(long, conflicts_with = "config")]
    pub no_config: bool,
    /// Baseline mode: fail only where drift got worse than in this JSON report.
    ///
    /// Worse by more than the policy's margins.
    #[arg(long, value_name = "FILE")]
    pub baseline_report: Option<PathBuf>,
}

/// What the report is written as, and what is kept besides it.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Reports")]
pub struct ReportArgs {
    /// Report format on stdout.
    #[arg(long, value_enum, default_value_t = ReportFormat::Table)]
    pub format: ReportFormat,
    #[command(flatten)]
    pub files: ReportFiles,
    /// Save the golden run's and every target's outputs as DIR/<target>/s<k>.npz.
    #[arg(long, value_name = "DIR")]
    pub save_outputs: Option<PathBuf>,
    /// Keep each target's runtime log as DIR/<target>.log (default with --out FILE: FILE's name
    /// with the extension .logs).
    #[arg(long, value_name = "DIR")]
    pub logs: Option<PathBuf>,
    /// Run the i-th of n parts of the targets (k-th target to part k mod n + 1; the baseline in
    /// every part); join the parts with `npu-audit merge`. `auto`: the part the cluster engine's
    /// array variables name (Kubernetes, Slurm, GitLab, Buildkite, AWS Batch; docs/scale.md).
    #[arg(long, value_name = "I/N|auto", value_parser = ShardFlag::parse)]
    pub shard: Option<ShardFlag>,
    /// Measure where the audit's time goes: phases of the audit and of every worker session, as a
    /// `timings` object in the JSON report and tables on stderr at the end (wall-clock figures:
    /// the only ones of a report that differ between runs).
    #[arg(long)]
    pub timings: bool,
}

/// How the per-layer audit localises drift.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LayersChoice {
    /// No per-layer audit (compare's default).
    None,
    /// Tap every layer (or those --op/--node/--tensor/--tap-list select).
    All,
    /// Cut the graph where every path goes through and bisect: O(log N) sessions per target.
    Bisect,
}

/// Flags of the per-layer audit (`compare --layers`, `layers`).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Layers")]
pub struct LayerArgs {
    /// Per-layer drift: all (tap the layers), bisect (cut the graph), none.
    ///
    /// Default: none for compare (all when a selection flag is given), all for `layers`.
    #[arg(long, value_enum, value_name = "MODE")]
    pub layers: Option<LayersChoice>,
    /// Tap layers of these op types (comma-separated or repeated), e.g. Softmax,LayerNormalization.
    #[arg(long = "op", value_name = "OP", value_delimiter = ',')]
    pub ops: Vec<String>,
    /// Tap layers whose node name matches (glob with * and ?, or /regex/; repeatable).
    #[arg(long = "node", value_name = "PATTERN", value_parser = Pattern::parse)]
    pub nodes: Vec<Pattern>,
    /// Tap layers whose tensor (tapped, float or reference name) matches (glob or /regex/).
    #[arg(long = "tensor", value_name = "PATTERN", value_parser = Pattern::parse)]
    pub tensors: Vec<Pattern>,
    /// Tap the layers named in a file (one node or tensor name or pattern per line).
    #[arg(long = "tap-list", value_name = "FILE")]
    pub tap_list: Option<PathBuf>,
    /// A quantized layer departs from the baseline beyond rounding when a code differs by more
    /// than N LSB (the first code difference at all is reported separately).
    #[arg(long = "layer-tolerance", default_value_t = 1, value_name = "LSB")]
    pub tolerance: u64,
    /// A float layer departs from the baseline beyond rounding when its largest difference
    /// exceeds this fraction of the baseline tensor's largest magnitude (default 2^-10, a
    /// float16 step: QNN runs float ops in float16).
    #[arg(long = "layer-float-tolerance", default_value_t = 1.0 / 1024.0, value_name = "FRACTION", value_parser = parse_fraction)]
    pub float_tolerance: f64,
    /// A layer costs accuracy when its SQNR against the golden run is more than DB below the
    /// baseline's on the same layer.
    #[arg(long = "layer-sqnr-loss", default_value_t = 3.0, value_name = "DB", value_parser = parse_positive)]
    pub sqnr_loss_db: f64,
    /// Do not run each layer alone on golden inputs (isolated attribution).
    #[arg(long)]
    pub no_isolate: bool,
    /// Run each layer in isolation together with the layers it reads, up to N-1 levels upstream
    /// (a window keeps fusions across layers; what it introduces is the window's).
    #[arg(long = "isolate-window", default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=64))]
    pub isolate_window: u64,
    /// Bytes of tapped tensors per sample one session may return (K, M, G suffixes; a plain
    /// number is MiB); more taps are split into runs.
    #[arg(long = "tap-memory", default_value = "256M", value_name = "SIZE", value_parser = parse_size)]
    pub tap_memory: u64,
    /// Layers listed per target in the terminal (worst first).
    #[arg(long = "top", default_value_t = 10, value_name = "N")]
    pub top: usize,
}

/// A fraction in (0, 1].
fn parse_fraction(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err(format!("'{text}' is not a fraction in (0, 1]")),
    }
}

/// A finite number of 0 or more.
fn parse_positive(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("'{text}' is not a finite number of 0 or more")),
    }
}

/// A byte count: `512K`, `16M`, `2G`, or a plain number of MiB.
fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 10),
        Some((i, 'M' | 'm')) => (&t[..i], 20),
        Some((i, 'G' | 'g')) => (&t[..i], 30),
        _ => (t, 20),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a size such as 512K, 16M or 2G"))?;
    n.checked_shl(shift)
        .filter(|&b| b > 0 && b >> shift == n)
        .ok_or_else(|| format!("'{text}' is not a size between 1K and 2^63 bytes"))
}

/// Flags of `explain-failure`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The ONNX model a target refuses.
    pub model: PathBuf,
    /// Target to explain (repeatable, e.g. qnn:sm8350 or qnn:all).
    #[arg(long = "target", short = 't', value_name = "TARGET", value_parser = TargetList::parse)]
    pub targets: Vec<TargetList>,
    #[command(flatten)]
    pub inputs: InputArgs,
    /// Report format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[command(flatten)]
    pub exec: ExecArgs,
}

/// Flags of `fingerprint`.
#[derive(Debug, Args)]
pub struct FingerprintArgs {
    /// Target to fingerprint (repeatable): cpu, cpu:noopt, qnn:<chipset>, qnn:all, openvino, ...
    /// Default: every target this machine can run.
    #[arg(long = "target", short = 't', value_name = "TARGET", value_parser = TargetList::parse)]
    pub targets: Vec<TargetList>,
    /// Run only these probes (repeatable; an id or prefix*). Default: all.
    #[arg(long = "probe", value_name = "ID")]
    pub probes: Vec<String>,
    /// Runs of every probe with identical inputs; outputs that are not bit-identical across runs
    /// make the probe's verdict non_deterministic.
    #[arg(long, default_value_t = 3, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub repeat: u64,
    /// Run the probes even when a cached fingerprint of the same target and runtime exists.
    #[arg(long)]
    pub refresh: bool,
    /// Neither read nor write the fingerprint cache.
    #[arg(long)]
    pub no_cache: bool,
    /// Report format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Also write the JSON report to this file (written atomically).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub exec: ExecArgs,
}

/// Flags of `targets`.
#[derive(Debug, Args)]
pub struct TargetsArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Use this ONNX Runtime library (or directory) for a build.
    #[arg(long = "runtime", value_name = "KEY=PATH", value_parser = RuntimeOverride::parse)]
    pub runtime: Vec<RuntimeOverride>,
    #[command(flatten)]
    pub runtime_env: RuntimeEnv,
}

/// `runtime` subcommands.
#[derive(Debug, Subcommand)]
pub enum RuntimeCommand {
    /// The default releases (and others in the cache), and where each one is on this machine;
    /// with --all, every release of the catalogue: pinned wheels, cores a plugin runs on, where
    /// it fails and why.
    List {
        /// Every release the catalogue knows.
        #[arg(long)]
        all: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Fetch releases into the cache now: KEY (its default release), KEY@VERSION, KEY@all, or
    /// all (every default release usable here). A plugin release brings the core it runs on.
    Install {
        /// Releases to install.
        #[arg(default_value = "all")]
        keys: Vec<String>,
        #[command(flatten)]
        runtime_env: RuntimeEnv,
    },
    /// Print the library path of a release (KEY or KEY@VERSION), fetching it if needed.
    Path {
        /// The release: cpu, qnn, openvino, directml, gpu, or KEY@VERSION.
        key: String,
        #[command(flatten)]
        runtime_env: RuntimeEnv,
    },
    /// Remove cached releases, compiled QNN contexts and evals' records no audit used for a while
    /// (never a default release, never one in use), and what killed downloads left behind.
    Gc {
        /// Keep releases, compiled contexts and evals' records used within this many days.
        #[arg(long, default_value_t = 30.0, value_name = "DAYS")]
        keep_days: f64,
        /// Only say what would be removed.
        #[arg(long)]
        dry_run: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Find the first release of a target's runtime whose outputs differ from --from's, and the
    /// first layer where it departs from the release before it.
    Bisect(Box<ReleaseBisectArgs>),
}

/// Flags of `runtime bisect`.
#[derive(Debug, Args)]
pub struct ReleaseBisectArgs {
    /// The quantized ONNX model.
    pub model: PathBuf,
    /// The target whose runtime releases are compared (qnn:sm8650, cpu, ...), without a release.
    #[arg(long = "target", short = 't', value_name = "TARGET", value_parser = TargetList::parse)]
    pub target: TargetList,
    /// The release known to be good (the target's plugin release for QNN).
    #[arg(long, value_name = "VERSION")]
    pub from: String,
    /// The newest release to try.
    #[arg(long, value_name = "VERSION")]
    pub to: String,
    /// A release differs when some output element differs from --from's by more than this (in
    /// the output's units; default: any differing bit).
    #[arg(long = "max-abs", value_name = "X")]
    pub max_abs: Option<f64>,
    /// Do not run the per-layer audit on the first differing release.
    #[arg(long)]
    pub no_layers: bool,
    #[command(flatten)]
    pub reference: ReferenceArgs,
    #[command(flatten)]
    pub inputs: InputArgs,
    #[command(flatten)]
    pub exec: ExecArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Also write the findings as JSON to FILE (`-`: stdout).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// The task an eval measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TaskChoice {
    /// Top-1 and top-k accuracy on an output's class axis (labels: class indices, or names with
    /// --classes).
    Classify,
    /// A binary decision per sample, --decision OUTPUT>THRESHOLD (labels: 1/0, true/false):
    /// accuracy, precision, recall, F1.
    Decide,
    /// Greedy CTC decoding of a text recognizer with --vocab (labels: transcripts): character and
    /// word error rates, exact match.
    Ctc,
    /// No labels: agreement with the reference's own top-1 class.
    Agree,
    /// A generation spec (MODEL is its .toml) decoded token by token (labels: spoken text): WER,
    /// CER, first divergent token per sample.
    Transcribe,
    /// A generation spec decoded token by token, no labels needed: agreement with the
    /// reference's text, first divergent token per sample.
    Generate,
}

/// `eval`: the model, its reference, the set, the task, the targets, the statistics, the files.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The ONNX model, or a generation spec (eval SPEC.toml --help lists its flags).
    ///
    /// A generation spec (.toml, docs/generation.md) is decoded token by token on every target
    /// and takes its own flags.
    pub model: PathBuf,
    #[command(flatten)]
    pub reference: ReferenceArgs,
    /// The labelled set: a directory of .npz samples, or one stacked .npz.
    ///
    /// docs/eval.md. A directory with one .npz per sample (its id: the file's stem), or one .npz whose arrays
    /// stack the samples on axis 0; labels in labels.csv / labels.jsonl or a `labels` array.
    #[arg(long, value_name = "DIR|FILE.npz", help_heading = "Set")]
    pub dataset: PathBuf,
    /// The task.
    ///
    /// What is measured on the set (docs/eval.md, "Tasks").
    #[arg(long, value_enum, help_heading = "Task")]
    pub task: TaskChoice,
    /// Class axis: AXIS, none, OUTPUT=AXIS or OUTPUT=none.
    #[arg(long = "class-axis", value_name = "AXIS", help_heading = "Task", value_parser = ClassAxisFlag::parse)]
    pub class_axis: Vec<ClassAxisFlag>,
    #[command(flatten)]
    pub targets: SetTargetArgs,
    #[command(flatten)]
    pub task_args: TaskArgs,
    #[command(flatten)]
    pub policy: PolicyFileArgs,
    /// The per-layer audit of up to K samples each target broke.
    ///
    /// It says which layer the flips come from.
    #[arg(long, value_name = "K", default_value_t = 0, help_heading = "Layers")]
    pub explain: u64,
    /// Keep every sample's records in DIR (new, or an earlier run's of the same eval: it resumes
    /// there); default with --out FILE: in the tool's cache, keyed by the eval (the same command
    /// run again resumes; `runtime gc` removes them).
    #[arg(long, value_name = "DIR", help_heading = "Reports")]
    pub records: Option<PathBuf>,
    /// Run part I of N of the eval (needs --out FILE; `merge` joins the parts).
    ///
    /// Work units of (target, sample range) split evenly by cost over N parts. `auto`: the part
    /// the cluster engine's array variables name (docs/scale.md).
    #[arg(long, value_name = "I/N|auto", value_parser = ShardFlag::parse, help_heading = "Scale")]
    pub shard: Option<ShardFlag>,
    /// Each target's cost per sample in the split (TARGET=WEIGHT,...; `npu-audit plan
    /// --costs-from` reads them off an earlier eval); default: the backend's (QNN 700, ARM64
    /// emulated 30, OpenVINO 2, CPU 1).
    #[arg(long, value_name = "TARGET=W,...", value_parser = Costs::parse, requires = "shard", help_heading = "Scale")]
    pub costs: Option<Costs>,
    /// Stop each gated target as soon as its limits are decided.
    ///
    /// Samples are taken in a seeded order. Anytime-valid 95% bounds on the drop and the accuracy decide --max-accuracy-drop and
    /// --min-accuracy; a target the set cannot decide fails (docs/eval.md).
    #[arg(long, help_heading = "Gate", conflicts_with = "shard")]
    pub until_decided: bool,
    /// The seed of the order --until-decided takes the samples in (recorded in the report).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        requires = "until_decided",
        help_heading = "Gate"
    )]
    pub order_seed: u64,
    #[command(flatten)]
    pub exec: ExecArgs,
    #[command(flatten)]
    pub reports: FindingsReportArgs,
}

/// `repro`: the model, its reference, the target and what it is compared with, where to start,
/// what departing means, the bundle and the reports.
#[derive(Debug, Args)]
pub struct ReproArgs {
    /// The quantized ONNX model.
    pub model: PathBuf,
    /// The fp32 model whose activations feed every window (default: derived from MODEL).
    #[arg(long)]
    pub reference: Option<PathBuf>,
    #[command(flatten)]
    pub inputs: InputArgs,
    /// The target whose departure is reproduced (one: qnn:sm8650, qnn:sm8650@2.7.0, ...).
    #[arg(long = "target", short = 't', value_name = "TARGET", help_heading = "Targets")]
    pub target: String,
    /// What the target is compared with: cpu, cpu:noopt, golden (the reference's activations
    /// quantized as the model does), or another target such as qnn:sm8650@2.5.0.
    #[arg(long, value_name = "TARGET|golden", default_value = "cpu", help_heading = "Targets")]
    pub against: String,
    /// Start from this layer (node, tensor or float tensor name) instead of the first that
    /// departs.
    #[arg(long, value_name = "NAME", help_heading = "Search")]
    pub layer: Option<String>,
    /// A quantized output departs when a code is N or more steps from the comparison's
    /// (default 2: beyond rounding).
    #[arg(long, value_name = "N", default_value_t = 2, help_heading = "Search", value_parser = clap::value_parser!(u64).range(1..))]
    pub min_steps: u64,
    /// Departing instead means: the target's SQNR against the golden activation at or below DB
    /// while the comparison's stays above.
    #[arg(
        long,
        value_name = "DB",
        help_heading = "Search",
        allow_hyphen_values = true,
        conflicts_with = "min_steps"
    )]
    pub max_sqnr: Option<f64>,
    /// A float output departs when its largest difference exceeds this fraction of the
    /// comparison's largest magnitude.
    #[arg(long, value_name = "FRACTION", default_value_t = 1.0 / 1024.0, help_heading = "Search")]
    pub float_tolerance: f64,
    /// Replace the bundle's weights by seeded random values of the same shape, type and
    /// quantization parameters, kept only if the departure still reproduces.
    #[arg(long, help_heading = "Bundle")]
    pub scrub_weights: bool,
    /// The seed of --scrub-weights.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        requires = "scrub_weights",
        help_heading = "Bundle"
    )]
    pub scrub_seed: u64,
    /// Write the bundle: a new or empty directory, or a file ending in .zip.
    #[arg(long, value_name = "DIR|FILE.zip", help_heading = "Bundle")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub exec: ExecArgs,
    /// Format on stdout.
    #[arg(long, value_enum, default_value_t = ReportFormat::Table, help_heading = "Reports")]
    pub format: ReportFormat,
    /// Also write the findings as JSON to FILE (`-`: stdout; docs/repro.schema.json).
    #[arg(long, value_name = "FILE", help_heading = "Reports")]
    pub report: Option<PathBuf>,
    /// Also write the findings as Markdown.
    #[arg(long, value_name = "FILE", help_heading = "Reports")]
    pub markdown: Option<PathBuf>,
}

/// What an eval measures and how it judges, shared by `eval` and `matrix --task`: the set's
/// labels and size, the task's settings, the statistics and the accuracy limits.
#[derive(Debug, Clone, Args)]
pub struct TaskArgs {
    #[command(flatten)]
    pub set: SetArgs,
    /// The output the task reads; required when the model has several.
    #[arg(long, value_name = "NAME", help_heading = "Task")]
    pub output: Option<String>,
    /// classify: the k of top-k accuracy.
    #[arg(long = "top-k", value_name = "K", default_value_t = 5, help_heading = "Task", value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub top_k: u64,
    /// classify: the class names, one per line.
    ///
    /// Labels may then be names.
    #[arg(long, value_name = "FILE", help_heading = "Task")]
    pub classes: Option<PathBuf>,
    /// decide: the decision, OUTPUT>THRESHOLD or OUTPUT<THRESHOLD.
    #[arg(long, value_name = "OUTPUT>THRESHOLD", help_heading = "Task", value_parser = Decision::parse_threshold)]
    pub decision: Option<Decision>,
    /// ctc: the vocabulary, one entry per line.
    ///
    /// As PaddleOCR's dictionaries: class 0 is the blank; a model with one more class than
    /// entries + 1 reads the last as a space.
    #[arg(long, value_name = "FILE", help_heading = "Task")]
    pub vocab: Option<PathBuf>,
    /// Non-inferiority margin in points (accuracy, or CER for ctc).
    #[arg(long, value_name = "POINTS", help_heading = "Gate")]
    pub margin: Option<f64>,
    #[command(flatten)]
    pub stats: StatArgs,
    #[command(flatten)]
    pub limits: AccuracyLimitArgs,
}

/// Which samples of a labelled set run, and whose labels: `eval` and generation audits.
#[derive(Debug, Clone, Args)]
pub struct SetArgs {
    /// A labels file (labels.csv or labels.jsonl) instead of the set's own.
    #[arg(long, value_name = "FILE", help_heading = "Set")]
    pub labels: Option<PathBuf>,
    /// Evaluate the first N samples of the set.
    #[arg(long, value_name = "N", help_heading = "Set", value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,
}

/// How the statistics are drawn: `eval` and generation audits.
#[derive(Debug, Clone, Args)]
pub struct StatArgs {
    /// Resamples of every bootstrap.
    #[arg(long, value_name = "N", default_value_t = 10_000, help_heading = "Statistics", value_parser = clap::value_parser!(u64).range(100..=1_000_000))]
    pub resamples: u64,
    /// Seed of the bootstrap's generator (docs/eval.md).
    #[arg(
        long = "stat-seed",
        value_name = "N",
        default_value_t = 0,
        help_heading = "Statistics"
    )]
    pub stat_seed: u64,
}

/// The limits of a set's accuracy: `eval`, `matrix --task` and generation audits.
#[derive(Debug, Clone, Args)]
pub struct AccuracyLimitArgs {
    /// Fail (exit 1) unless the accuracy is shown at least FRACTION.
    ///
    /// Shown: its one-sided 95% Wilson lower bound is at least FRACTION. For a generation spec:
    /// the share of transcripts equal to their label (transcribe) or of texts equal to the
    /// reference's (generate).
    #[arg(long = "min-accuracy", value_name = "FRACTION", help_heading = "Gate")]
    pub min_accuracy: Option<f64>,
    /// Fail (exit 1) unless the drop is shown within POINTS.
    ///
    /// Non-inferiority: the drop's one-sided 95% upper bound against the reference (Tango's
    /// score bound for accuracy) is at most POINTS; a sample too small to show it fails. For a
    /// generation spec: the WER's increase (transcribe) or the share of texts unlike the
    /// reference's (generate), in points.
    #[arg(long = "max-accuracy-drop", value_name = "POINTS", help_heading = "Gate")]
    pub max_accuracy_drop: Option<f64>,
}

/// The targets of a set audit: `eval` and generation audits.
#[derive(Debug, Clone, Args)]
pub struct SetTargetArgs {
    /// Target (repeatable); default: every target this machine can run.
    #[arg(long = "target", short = 't', value_name = "TARGET", help_heading = "Targets", value_parser = TargetList::parse)]
    pub targets: Vec<TargetList>,
    /// Targets whose failure does not fail the eval (id, prefix*, or all).
    #[arg(long = "allow-failure", value_name = "PATTERN", help_heading = "Targets", value_parser = TargetPattern::parse)]
    pub allow_failure: Vec<TargetPattern>,
    /// Do not add the cpu:noopt baseline (the reference integer implementation).
    #[arg(long, help_heading = "Targets")]
    pub no_baseline: bool,
}

/// The release policy file of a set audit: `eval` and generation audits.
#[derive(Debug, Clone, Args)]
pub struct PolicyFileArgs {
    /// The release policy file.
    ///
    /// Its `min_accuracy` and `max_accuracy_drop` per target. Default: npu-audit.toml in the current directory or the nearest parent up to the
    /// repository root.
    #[arg(long, value_name = "FILE", env = "NPU_AUDIT_CONFIG", help_heading = "Gate")]
    pub config: Option<PathBuf>,
    /// Read no policy file.
    #[arg(long, conflicts_with = "config", help_heading = "Gate")]
    pub no_config: bool,
}

/// Where a set audit's findings go: `eval` and generation audits.
#[derive(Debug, Clone, Args)]
pub struct FindingsReportArgs {
    /// Format on stdout.
    #[arg(long, value_enum, default_value_t = ReportFormat::Table, help_heading = "Reports")]
    pub format: ReportFormat,
    /// Also write the findings as JSON to FILE (`-`: stdout).
    #[arg(long, value_name = "FILE", help_heading = "Reports")]
    pub out: Option<PathBuf>,
    /// Also write the findings as Markdown.
    #[arg(long, value_name = "FILE", help_heading = "Reports")]
    pub markdown: Option<PathBuf>,
    /// Also write one self-contained HTML page.
    #[arg(long, value_name = "FILE", help_heading = "Reports")]
    pub html: Option<PathBuf>,
}

/// What a generation spec's samples are to the audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GenerationTaskChoice {
    /// Labels are the spoken text: WER, CER and the first divergent token per sample.
    Transcribe,
    /// No labels needed: agreement with the reference's text, the first divergent token per
    /// sample.
    Generate,
    /// Corpus drift of a decoder-only spec: each sample a window of text fed teacher-forced;
    /// KLD, the same top token and perplexity at every position (llama.cpp's figures).
    Score,
}

/// `--prompt-lengths`: the lengths swept, sorted and distinct.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptLengths(pub Vec<usize>);

/// The most lengths one sweep takes (every cut of every prompt is a decode).
const MOST_PROMPT_LENGTHS: usize = 4096;

/// Parses `1,31-33,63`: lengths and inclusive ranges of lengths, each at least 1.
fn prompt_lengths(text: &str) -> Result<PromptLengths, String> {
    let mut lengths = Vec::new();
    for item in text.split(',').map(str::trim) {
        let number = |t: &str| -> Result<usize, String> {
            match t.trim().parse::<usize>() {
                Ok(n) if n >= 1 => Ok(n),
                _ => Err(format!(
                    "'{t}' is not a prompt length (a whole number of tokens, 1 or more)"
                )),
            }
        };
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (number(a)?, number(b)?);
                if a > b {
                    return Err(format!("'{item}' is an empty range"));
                }
                if b - a >= MOST_PROMPT_LENGTHS {
                    return Err(format!("'{item}' sweeps more than {MOST_PROMPT_LENGTHS} lengths"));
                }
                lengths.extend(a..=b);
            }
            None => lengths.push(number(item)?),
        }
    }
    lengths.sort_unstable();
    lengths.dedup();
    if lengths.len() > MOST_PROMPT_LENGTHS {
        return Err(format!("more than {MOST_PROMPT_LENGTHS} lengths"));
    }
    Ok(PromptLengths(lengths))
}

/// The limits of a corpus drift audit (`eval SPEC.toml --task score`).
#[derive(Debug, Clone, Args)]
pub struct CorpusLimitArgs {
    /// Fail (exit 1) unless the mean KLD is shown at most NATS (its one-sided 95% upper bound,
    /// from a bootstrap over windows).
    #[arg(long = "max-kld-mean", value_name = "NATS", help_heading = "Gate")]
    pub max_kld_mean: Option<f64>,
    /// Fail (exit 1) unless the 99th percentile KLD is shown at most NATS (299 positions or
    /// more can show it).
    #[arg(long = "max-kld-p99", value_name = "NATS", help_heading = "Gate")]
    pub max_kld_p99: Option<f64>,
    /// Fail (exit 1) unless the share of positions whose top token is the reference's is shown
    /// at least FRACTION.
    #[arg(long = "min-same-top", value_name = "FRACTION", help_heading = "Gate")]
    pub min_same_top: Option<f64>,
    /// Fail (exit 1) unless the target's perplexity over the reference's is shown at most RATIO
    /// (1.01: 1% higher).
    #[arg(long = "max-ppl-ratio", value_name = "RATIO", help_heading = "Gate")]
    pub max_ppl_ratio: Option<f64>,
}

/// `eval SPEC.toml`: a generation spec (docs/generation.md) decoded token by token on every
/// target, its own tokens fed back, against the fp32 reference's decode.
#[derive(Debug, Args)]
pub struct GenerationArgs {
    /// The generation spec (.toml: docs/generation.md).
    pub spec: PathBuf,
    /// The set: a directory of .npz samples (input_features, or a prompt's input_ids).
    #[arg(long, value_name = "DIR|FILE.npz", help_heading = "Set")]
    pub dataset: PathBuf,
    #[command(flatten)]
    pub set: SetArgs,
    /// What the samples are to the audit.
    #[arg(long, value_enum, help_heading = "Task")]
    pub task: GenerationTaskChoice,
    #[command(flatten)]
    pub targets: SetTargetArgs,
    #[command(flatten)]
    pub stats: StatArgs,
    #[command(flatten)]
    pub limits: AccuracyLimitArgs,
    #[command(flatten)]
    pub corpus_limits: CorpusLimitArgs,
    #[command(flatten)]
    pub policy: PolicyFileArgs,
    /// The per-layer audit of the part call at the first divergence of up to K samples per
    /// target.
    #[arg(long, value_name = "K", default_value_t = 0, help_heading = "Layers")]
    pub explain: u64,
    /// Sweep prompt lengths: each prompt cut to its first L tokens for every L (`1,31,32,33`,
    /// `30-34`), each cut decoded (--task generate, decoder-only).
    ///
    /// Per target and length: the first new token's agreement with the reference's and its KL,
    /// the decodes that depart; and the lengths where a prompt's first token departs while every
    /// shorter cut of it agreed (a prefill chunk boundary, the KV buffer's end). Prompts shorter
    /// than L are skipped at L.
    #[arg(long = "prompt-lengths", value_name = "LIST", value_parser = prompt_lengths, help_heading = "Task")]
    pub prompt_lengths: Option<PromptLengths>,
    #[command(flatten)]
    pub exec: ExecArgs,
    #[command(flatten)]
    pub reports: FindingsReportArgs,
}

/// The command line of `eval` on a generation spec, parsed apart from the others' (its flags are
/// its own: one that only a one-pass eval takes is refused by clap as unknown here).
#[derive(Debug, Parser)]
#[command(
    name = "eval",
    bin_name = "npu-audit eval",
    about = "Decode a generation spec (SPEC.toml: docs/generation.md) on every target, its own tokens fed back, against the fp32 reference: where each departs, what it costs in words, how each step's logits drift",
    after_help = EXIT_CODES
)]
pub struct GenerationCli {
    #[command(flatten)]
    pub args: GenerationArgs,
    #[command(flatten)]
    pub global: GlobalArgs,
}

/// `pipeline`: the pipeline file, the targets, the first stage's inputs and the files.
#[derive(Debug, Clone, Args)]
pub struct PipelineArgs {
    /// The pipeline: [[stage]] tables with name, model, reference (optional) and feeds
    /// (INPUT = "STAGE.OUTPUT"; default: the previous stage's output of the input's name).
    pub file: PathBuf,
    /// Target to run every stage on (repeatable). Default: every target this machine can run.
    #[arg(long = "target", short = 't', value_name = "TARGET", value_parser = TargetList::parse)]
    pub targets: Vec<TargetList>,
    /// Fail (exit 1) when a target's final output is below DB against the golden chain.
    #[arg(long = "min-sqnr", value_name = "DB", allow_hyphen_values = true)]
    pub min_sqnr: Option<f64>,
    #[command(flatten)]
    pub inputs: InputArgs,
    #[command(flatten)]
    pub exec: ExecArgs,
    /// Format on stdout.
    #[arg(long, value_enum, default_value_t = ReportFormat::Table, help_heading = "Reports")]
    pub format: ReportFormat,
    /// Also write the findings as JSON to FILE (`-`: stdout).
    #[arg(long, value_name = "FILE", help_heading = "Reports")]
    pub out: Option<PathBuf>,
}

/// `matrix`: the variants, the targets, the policy, the remedies and the files.
#[derive(Debug, Clone, Args)]
pub struct MatrixArgs {
    /// A model variant (repeatable): NAME=MODEL.onnx[,[EP:]KEY=VALUE]...
    ///
    /// Options without an EP go to the QNN targets (`session.` keys to every target): an fp32
    /// model with `enable_htp_fp16_precision=1` is the fp16 variant.
    #[arg(long = "variant", value_name = "NAME=MODEL", required = true, value_parser = Variant::parse)]
    pub variants: Vec<Variant>,
    /// A column (repeatable); default: every target this machine can run.
    ///
    /// cpu, qnn:<chipset>, qnn:all, openvino... (one release each).
    #[arg(long = "target", short = 't', value_name = "TARGET", value_parser = TargetList::parse)]
    pub targets: Vec<TargetList>,
    /// The variants cheapest first, comma-separated (default: int8 < a16w8 < fp16 < fp32 by
    /// what each graph computes; running on the CPU is always last).
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    pub cost: Vec<String>,
    /// Class axis for top-1 agreement: AXIS, none, OUTPUT=AXIS or OUTPUT=none.
    #[arg(long = "class-axis", value_name = "AXIS", value_parser = ClassAxisFlag::parse)]
    pub class_axis: Vec<ClassAxisFlag>,
    /// Search mixed-precision fixes for variants that fail somewhere (repeatable).
    ///
    /// widen16: the worst layers' 8-bit activations to 16 bits; float: left in float.
    #[arg(long = "search", value_enum, value_name = "REMEDY")]
    pub search: Vec<RemedyChoice>,
    /// Layers a search may change at most.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub max_promoted: u64,
    /// Write every candidate model of the searches into DIR (new or empty).
    #[arg(long, value_name = "DIR", requires = "search")]
    pub write_candidates: Option<PathBuf>,
    /// Fill the cells with task accuracy on this labelled set.
    ///
    /// docs/eval.md. Every variant is evaluated on every target against the reference, and --min-accuracy
    /// and --max-accuracy-drop decide which variant each target gets.
    #[arg(long, value_name = "DIR|FILE.npz", requires = "task", help_heading = "Set")]
    pub dataset: Option<PathBuf>,
    /// What is measured on the set (with --dataset).
    #[arg(long, value_enum, requires = "dataset", help_heading = "Task")]
    pub task: Option<TaskChoice>,
    #[command(flatten)]
    pub task_args: TaskArgs,
    #[command(flatten)]
    pub reference: ReferenceArgs,
    #[command(flatten)]
    pub inputs: InputArgs,
    #[command(flatten)]
    pub gate: GateArgs,
    #[command(flatten)]
    pub exec: ExecArgs,
    /// Format on stdout.
    #[arg(long, value_enum, default_value_t = ReportFormat::Table, help_heading = "Reports")]
    pub format: ReportFormat,
    /// Also write the matrix as JSON to FILE (`-`: stdout).
    #[arg(long, value_name = "FILE", help_heading = "Reports")]
    pub out: Option<PathBuf>,
    /// Also write the matrix as Markdown.
    #[arg(long, value_name = "FILE", help_heading = "Reports")]
    pub markdown: Option<PathBuf>,
    /// Also write the matrix as an HTML page with a heat map of the cells.
    #[arg(long, value_name = "FILE", help_heading = "Reports")]
    pub html: Option<PathBuf>,
    /// Write the dispatch table an app loads, as JSON.
    ///
    /// Per target: the model file, the EP and its options.
    #[arg(long, value_name = "FILE", help_heading = "Reports")]
    pub dispatch: Option<PathBuf>,
}

/// A mixed-precision remedy `matrix --search` tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RemedyChoice {
    /// Activations of the worst layers quantized to 16 bits over their 8-bit range.
    Widen16,
    /// Activations of the worst layers left in float (their Q/DQ pair removed).
    Float,
}

/// Flags of `triage`.
#[derive(Debug, Args)]
pub struct TriageArgs {
    /// The quantized ONNX model the devices ran (with `--summary`: narrows the summary to it).
    #[arg(value_name = "MODEL", required_unless_present_any = ["summary", "model_flag"])]
    pub model: Option<PathBuf>,
    /// Device reports: report directories, `.zip` reports, `qnn-net-run` output directories, AI
    /// Hub `.npz` files, or directories holding many of them (a fleet).
    #[arg(value_name = "REPORT", required_unless_present_any = ["summary", "model_flag"])]
    pub reports: Vec<PathBuf>,
    /// The model as a flag, as triage took it before MODEL became its first argument (kept for
    /// scripts; every argument is then a report).
    #[arg(long = "model", id = "model_flag", value_name = "MODEL", hide = true)]
    pub model_flag: Option<PathBuf>,
    /// The store that makes triage incremental (reports already triaged are read back, local
    /// runs are kept per target and input set); default: `triage.db` in the user's data
    /// directory (`$NPU_AUDIT_DATA`, else `$XDG_DATA_HOME/npu-audit`, else
    /// `~/.local/share/npu-audit`), one store for every model, keyed by model and reference.
    #[arg(long, value_name = "FILE")]
    pub db: Option<PathBuf>,
    /// Triage without a store (everything measured now, nothing kept).
    #[arg(long, conflicts_with_all = ["db", "summary"])]
    pub no_db: bool,
    /// Print what the store holds instead of triaging: per model and reference, the stored
    /// reports' verdicts and the fleet analysed again; MODEL narrows it to one model.
    #[arg(long)]
    pub summary: bool,
    /// The chipset of reports that do not state one (AI Hub device name or chipset attribute,
    /// part number, marketing name, board platform).
    #[arg(long, value_name = "CHIPSET")]
    pub chipset: Option<String>,
    /// Targets every report is compared with (repeatable; `--candidate` is the old spelling).
    /// A report whose chipset is known is also compared with its own chipset, at the QNN release
    /// its `device.json` names, else the catalogue's default.
    #[arg(long = "target", short = 't', alias = "candidate", value_name = "TARGET", default_values = ["cpu:noopt", "cpu", "qnn:all"], value_parser = TargetList::parse)]
    pub candidates: Vec<TargetList>,
    /// Do not run the phone's own CPU. By default a report that its chipset's simulation does
    /// not reproduce and that is nearest a CPU EP is also compared with the ARM64 CPU EP, emulated
    /// on the cores its chipset ships with (docs/device-reports.md; provisioned on first use, an
    /// emulated run costs about 100-200x the x86 CPU EP's).
    #[arg(long)]
    pub no_arm64: bool,
    /// A device within this many quantization steps of its chipset's simulation differs from it
    /// only in rounding.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub rounding_steps: u64,
    /// A chipset whose median SQNR is this many dB below the CPU EP's drifts beyond quantization.
    #[arg(long, value_name = "DB", default_value_t = 3.0)]
    pub excess_db: f64,
    /// A report this many dB below its chipset's median is an outlier (device-specific).
    #[arg(long, value_name = "DB", default_value_t = 6.0)]
    pub outlier_db: f64,
    /// Reports at or above this SQNR are no problem (the fleet is healthy when all are).
    #[arg(long, value_name = "DB")]
    pub min_sqnr: Option<f64>,
    #[command(flatten)]
    pub reference: ReferenceArgs,
    #[command(flatten)]
    pub inputs: InputArgs,
    #[command(flatten)]
    pub exec: ExecArgs,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = ReportFormat::Table)]
    pub format: ReportFormat,
    /// Also write the triage as JSON to FILE (`-`: stdout).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Also write the triage as Markdown to FILE (a support ticket, `$GITHUB_STEP_SUMMARY`; `-`:
    /// stdout).
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Also write one self-contained HTML page (SQNR per chipset, filterable report list) to
    /// FILE (`-`: stdout).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

/// `golden` subcommands.
#[derive(Debug, Subcommand)]
pub enum GoldenCommand {
    /// Run a reference model on the CPU (graph optimizations off) and store the run.
    Create {
        /// The fp32 reference model.
        model: PathBuf,
        /// Directory to create.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Replace DIR if it exists.
        #[arg(long)]
        force: bool,
        /// Also store every float activation of the reference per sample (layers/s<k>.npz) and a
        /// copy of the model, so `compare --golden DIR --layers all` needs no reference run.
        #[arg(long)]
        layers: bool,
        #[command(flatten)]
        inputs: InputArgs,
        #[command(flatten)]
        exec: ExecArgs,
    },
}
