//! `npu-audit matrix`: every model variant (int8, a16w8, fp16 through EP options...) on every
//! target, each cell a `compare` target run against one golden run; the cheapest variant that
//! meets the policy per target, as a dispatch table; and, for variants that fail somewhere,
//! mixed-precision remedies built from the per-layer audit and proven by re-audit.

pub mod accuracy;
pub mod cells;
pub mod choose;
pub mod remedy;

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::Result;

use crate::analyses::metrics::ClassAxisFlag;
use crate::commands::compare::{run_compare, Audited, CompareOptions, Execution, GoldenSource, Kept, Measured};
use crate::data::inputs::InputOptions;
use crate::data::target::{Backend, ReleaseSpec, TargetSpec};
use crate::execution::exec::ExecOptions;
use crate::foundation::error::bad_flag;
use crate::foundation::userfile::{InputFiles, Outputs, Reads};
use crate::judge::policy::Policy;
use crate::report::compare::Report;
use crate::report::matrix::{Cell, RemedyKind};
pub use crate::report::matrix::{Matrix, VariantInfo, MATRIX_SCHEMA_VERSION};

/// One `--variant NAME=PATH[,[EP:]KEY=VALUE]...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    pub name: String,
    pub path: PathBuf,
    /// Options with the execution provider they are for (`None`: QNN, the NPU; `session.`
    /// keys go to every target).
    pub options: Vec<(Option<String>, String, String)>,
}

impl Variant {
    /// Parses a `--variant` value.
    pub fn parse(text: &str) -> Result<Variant> {
        let syntax = "NAME=MODEL.onnx[,[EP:]KEY=VALUE]...";
        let mut parts = text.split(',');
        let head = parts.next().unwrap_or("");
        let Some((name, path)) = head.split_once('=') else {
            return Err(bad_flag(format!("--variant {text}: expected {syntax}")));
        };
        let name_ok = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
        if !name_ok || path.is_empty() {
            return Err(bad_flag(format!(
                "--variant {text}: expected {syntax}, NAME of letters, digits, '_', '.', '-'"
            )));
        }
        let mut options = Vec::new();
        for opt in parts {
            let Some((key, value)) = opt.split_once('=').filter(|(k, _)| !k.trim().is_empty()) else {
                return Err(bad_flag(format!("--variant {text}: option {opt:?} is not KEY=VALUE")));
            };
            let (ep, key) = match key.split_once(':') {
                Some((ep, k)) if ["qnn", "cpu", "openvino", "dml", "cuda", "tensorrt"].contains(&ep) => {
                    (Some(ep.to_string()), k)
                }
                Some((ep, _)) => {
                    return Err(bad_flag(format!(
                    "--variant {text}: {ep:?} is not an execution provider (qnn, cpu, openvino, dml, cuda, tensorrt)"
                )))
                }
                None => (None, key),
            };
            options.push((ep, key.trim().to_string(), value.trim().to_string()));
        }
        Ok(Variant {
            name: name.to_string(),
            path: PathBuf::from(path),
            options,
        })
    }

    /// The options of this variant that a target on `backend` gets.
    pub fn options_for(&self, backend: &Backend) -> Vec<(String, String)> {
        let kind = backend_kind(backend);
        self.options
            .iter()
            .filter(|(ep, key, _)| match ep {
                Some(ep) => ep == kind,
                None => key.starts_with("session.") || kind == "qnn",
            })
            .map(|(_, k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

fn backend_kind(b: &Backend) -> &'static str {
    match b {
        Backend::Cpu => "cpu",
        Backend::Arm64 { .. } => "cpu-arm64",
        Backend::Qnn(_) => "qnn",
        Backend::OpenVino { .. } => "openvino",
        Backend::DirectMl => "dml",
        Backend::Cuda => "cuda",
        Backend::TensorRt => "tensorrt",
    }
}

/// Which remedies are searched for variants that fail the policy somewhere.
#[derive(Debug, Clone, Default)]
pub struct RemedyOptions {
    pub kinds: Vec<RemedyKind>,
    /// Layers a search may change at most.
    pub max_promoted: usize,
    /// Where the candidate models go, when asked.
    pub write_candidates: Option<PathBuf>,
}

/// `matrix --dataset --task`: what fills the cells instead of SQNR.
#[derive(Debug, Clone)]
pub struct MatrixTaskOptions {
    pub dataset: crate::commands::eval::DatasetOptions,
    pub task: crate::analyses::accuracy::task::TaskSpec,
    /// The files the task was read from (`--classes`, `--vocab`).
    pub task_files: Vec<PathBuf>,
    pub stats: crate::analyses::accuracy::StatOptions,
}

/// Everything `matrix` was asked to do.
#[derive(Debug, Clone)]
pub struct MatrixOptions {
    pub variants: Vec<Variant>,
    /// The columns: one release each, groups expanded.
    pub targets: Vec<TargetSpec>,
    /// Where the golden run comes from (every cell is compared with the same one).
    pub golden: GoldenSource,
    pub inputs: InputOptions,
    pub exec: ExecOptions,
    /// The policy every cell is judged by (its file and the limit flags).
    pub policy: Policy,
    pub class_axis: Vec<ClassAxisFlag>,
    /// `--cost`: the variants cheapest first (empty: by precision).
    pub cost: Vec<String>,
    pub remedies: RemedyOptions,
    /// `--dataset` and `--task`: the cells measure task accuracy on a labelled set.
    pub task: Option<MatrixTaskOptions>,
}

impl Reads for MatrixOptions {
    fn declare(&self, set: &mut InputFiles) {
        let MatrixOptions {
            variants,
            targets: _,
            golden,
            inputs,
            exec,
            policy,
            class_axis: _,
            cost: _,
            remedies: _,
            task,
        } = self;
        set.add_all(variants.iter().map(|v| &v.path))
            .with(golden)
            .with(inputs)
            .with(exec)
            .with(policy);
        if let Some(t) = task {
            set.add(&t.dataset.path)
                .add_all(&t.dataset.labels)
                .add_all(&t.task_files);
        }
    }
}

/// The golden run every cell is compared with, once the matrix has it: a stored run, whose
/// directory supplies the inputs.
#[derive(Debug, Clone)]
struct CellGolden {
    source: GoldenSource,
    /// The inputs the cells are given besides the golden run (a golden run given by the user
    /// comes with the inputs as asked, which `compare` refuses beside it; one the matrix made
    /// supplies them itself).
    inputs: InputOptions,
    /// When the matrix made the golden run from `--reference`: the inputs as asked, for the
    /// searches' per-layer audits, which run the reference model themselves on them (a stored
    /// golden run may lack activations they need). `None` with a golden run given: the
    /// per-layer audits use it, and so its inputs.
    asked_inputs: Option<InputOptions>,
}

/// The matrix as it runs: what was asked, and the one golden run.
pub struct MatrixRun<'o> {
    pub opts: &'o MatrixOptions,
    golden: CellGolden,
}

/// The targets as asked, groups expanded (`qnn:all`) and checked: one release each. Without
/// any, every target this machine can run, as `compare` does.
pub fn expand_targets(targets: &[crate::data::target::TargetList]) -> Result<Vec<TargetSpec>> {
    let mut specs = crate::data::target::distinct(targets);
    if specs.is_empty() {
        specs = crate::execution::exec::selection::default_specs_said();
    }
    if let Some(s) = specs.iter().find(|s| s.release == Some(ReleaseSpec::All)) {
        return Err(bad_flag(format!(
            "--target {}: a matrix column is one release; name it (@VERSION)",
            s.id
        )));
    }
    Ok(specs)
}

/// Runs `model` (the variant's file or a candidate of it, `model_bytes` with its external data)
/// on `specs` with `variant`'s options in one `compare`, and returns each target's cell in
/// `specs` order, with the report.
pub fn audit_cells(
    run: &MatrixRun<'_>,
    variant: &Variant,
    (model, model_bytes): (&std::path::Path, u64),
    specs: &[TargetSpec],
    layers: Option<crate::analyses::layers::LayerOptions>,
) -> Result<(Vec<Cell>, Report)> {
    let targets = specs
        .iter()
        .map(|spec| spec.with_options(&variant.options_for(&spec.backend)))
        .collect::<Result<Vec<_>>>()?;
    let opts = run.opts;
    let (golden, inputs) = match (&layers, &run.golden.asked_inputs) {
        (Some(_), Some(asked)) => (
            GoldenSource {
                stored: None,
                ..run.golden.source.clone()
            },
            asked.clone(),
        ),
        _ => (run.golden.source.clone(), run.golden.inputs.clone()),
    };
    let audit = CompareOptions {
        audited: Audited {
            model: model.to_path_buf(),
            golden,
            inputs,
        },
        execution: Execution {
            baseline: layers.is_some(),
            // A search's candidate is a temporary model: its compiled contexts are not stored.
            scope: if model == variant.path {
                crate::execution::exec::ModelScope::Whole
            } else {
                crate::execution::exec::ModelScope::Part
            },
            ..Execution::findings(targets.clone(), opts.exec.clone())
        },
        measured: Measured {
            class_axis: opts.class_axis.clone(),
            policy: opts.policy.clone(),
            layers,
            ..Measured::outputs_only()
        },
        kept: Kept::default(),
    };
    let report = run_compare(&audit, &mut Outputs::none())?;
    let cells = specs
        .iter()
        .zip(&targets)
        .filter_map(|(spec, cell)| {
            let row = report.targets.iter().find(|t| t.id == cell.id)?;
            Some(cells::cell(&report, row, &variant.name, &spec.id, model_bytes))
        })
        .collect();
    Ok((cells, report))
}

/// The limits the gate applied, one `rule limit` per distinct pair (not the rule that a target
/// ran: a cell's status says that).
fn policy_lines<'r>(rules: impl Iterator<Item = &'r crate::report::gate::RuleResult>) -> Vec<String> {
    let set: BTreeSet<String> = rules
        .filter(|r| r.rule != crate::report::gate::Rule::Ran)
        .map(|r| format!("{} {}", r.rule, r.limit.0))
        .collect();
    set.into_iter().collect()
}

/// Every cell, measured one variant at a time, with what the report says of the measurement.
struct Cells {
    cells: Vec<Cell>,
    /// The limits the gate applied.
    policy: Vec<String>,
    intra_op_threads: Option<usize>,
    /// How the reference is named.
    reference: String,
    task: Option<crate::report::matrix::MatrixTask>,
}

/// The variants to measure, cheapest first.
fn in_order<'o>(
    opts: &'o MatrixOptions,
    variants: &'o [VariantInfo],
    order: &[String],
) -> Vec<(&'o Variant, &'o VariantInfo)> {
    order
        .iter()
        .filter_map(|n| {
            let info = variants.iter().find(|v| v.name == *n)?;
            let v = opts.variants.iter().find(|v| v.name == *n)?;
            Some((v, info))
        })
        .collect()
}

/// The cells in signal terms: one `compare` per variant against the one golden run.
fn measure_signal(run: &MatrixRun<'_>, ordered: &[(&Variant, &VariantInfo)], reference: String) -> Result<Cells> {
    let specs = run.opts.targets.as_slice();
    let mut cells = Vec::new();
    let mut reports = Vec::new();
    for (v, info) in ordered {
        crate::foundation::console::note(format!("matrix: variant {} on {} targets", v.name, specs.len()));
        let (c, report) = audit_cells(run, v, (&v.path, info.size_bytes), specs, None)?;
        cells.extend(c);
        reports.push(report);
        crate::foundation::interrupt::check()?;
    }
    Ok(Cells {
        cells,
        policy: policy_lines(reports.iter().flat_map(|r| &r.gate.rules)),
        intra_op_threads: reports.iter().flat_map(|r| &r.targets).find_map(|t| t.intra_op_threads),
        reference,
        task: None,
    })
}

/// The cells in task terms: one `eval` per variant on the labelled set.
fn measure_accuracy(
    opts: &MatrixOptions,
    task: &MatrixTaskOptions,
    ordered: &[(&Variant, &VariantInfo)],
) -> Result<Cells> {
    let specs = opts.targets.as_slice();
    let reference =
        match (&opts.golden.stored, &opts.golden.reference) {
            (Some(dir), _) => dir.display().to_string(),
            (None, Some(model)) => model.display().to_string(),
            (None, None) => return Err(bad_flag(
                "matrix --task needs the float model (--reference FP32.onnx) or a golden run of the set (--golden DIR)",
            )),
        };
    let mut cells = Vec::new();
    let mut reports = Vec::new();
    for (v, info) in ordered {
        crate::foundation::console::note(format!(
            "matrix: variant {} on {} targets, {} on the set",
            v.name,
            specs.len(),
            task_name(task)
        ));
        let (c, report) = accuracy::eval_cells(opts, task, v, (&v.path, info.size_bytes), specs)?;
        cells.extend(c);
        reports.push(report);
        crate::foundation::interrupt::check()?;
    }
    Ok(Cells {
        cells,
        policy: policy_lines(reports.iter().flat_map(|r| &r.gate.rules)),
        intra_op_threads: reports.iter().flat_map(|r| &r.targets).find_map(|t| t.intra_op_threads),
        reference,
        task: reports.first().map(accuracy::task_info),
    })
}

fn task_name(task: &MatrixTaskOptions) -> &'static str {
    use crate::analyses::accuracy::task::TaskSpec;
    match task.task {
        TaskSpec::Classify { .. } => "classify",
        TaskSpec::Decide { .. } => "decide",
        TaskSpec::Ctc { .. } => "ctc",
        TaskSpec::Agree { .. } => "agree",
    }
}

/// Runs the matrix: every variant measured on every target (one `compare` against one golden
/// run, or with `--task` one `eval` on the set), the recommendations, then the remedy searches
/// asked for.
pub fn run(opts: &MatrixOptions, outputs: &mut Outputs) -> Result<Matrix> {
    let work = crate::foundation::process::owned_tempdir("npu-audit-matrix-")?;
    let specs = opts.targets.as_slice();
    // Every variant is read before anything runs: a bad model is refused at once.
    let variants = variant_infos(&opts.variants)?;
    let order = choose::cost_order(&variants, &opts.cost);
    let ordered = in_order(opts, &variants, &order);
    let (measured, run) = match &opts.task {
        Some(task) => (measure_accuracy(opts, task, &ordered)?, None),
        None => {
            let (golden, reference) = golden_for_all(opts, work.path())?;
            let run = MatrixRun { opts, golden };
            (measure_signal(&run, &ordered, reference)?, Some(run))
        }
    };
    let cells = measured.cells;
    let target_ids: Vec<String> = specs.iter().map(|s| s.id.clone()).collect();
    let mut recommendations = choose::recommend(&cells, &order, &target_ids);
    let policy = measured.policy;
    let dispatch = choose::dispatch(&recommendations, &cells, (&variants, specs), policy.clone());
    let remedies = match &run {
        Some(run) => remedy::search_all(run, &cells, (&variants, &order), work.path(), outputs)?,
        None => Vec::new(),
    };
    choose::add_remedies(&mut recommendations, &remedies, &order);
    let mut notes = Vec::new();
    if policy.is_empty() {
        let limits = if opts.task.is_some() {
            "--min-accuracy, --max-accuracy-drop, a policy file"
        } else {
            "--min-sqnr, --max-abs, --min-top1, a policy file"
        };
        notes.push(format!("no limits were set ({limits}): every cell that ran meets the policy, and the cheapest variant that runs is recommended"));
    }
    // A gate: under limits, every target must have a variant that meets them on the target
    // itself; a target whose recommendation runs on the CPU instead (or has none) fails it, the
    // CPU fallback staying in the dispatch table for the app.
    let failing = !policy.is_empty() && recommendations.iter().any(|r| !r.runs_on_itself());
    let exit_code = crate::judge::gate::exit_code(false, crate::report::gate::Verdict::judged(failing));
    Ok(Matrix {
        schema_version: MATRIX_SCHEMA_VERSION,
        kind: crate::report::common::ReportKind::Matrix,
        tool: crate::report::common::ToolInfo::this(),
        host: Some(crate::foundation::host::this_host().into()),
        reference: measured.reference,
        policy,
        cost_order: order,
        variants,
        targets: target_ids,
        cells,
        recommendations,
        dispatch,
        remedies,
        task: measured.task,
        intra_op_threads: measured.intra_op_threads,
        notes,
        exit_code,
    })
}

/// The one golden run every cell compares against: the one given, or the reference model run
/// once into `work`. Returns it and how the report names it.
fn golden_for_all(opts: &MatrixOptions, work: &std::path::Path) -> Result<(CellGolden, String)> {
    if let Some(dir) = &opts.golden.stored {
        let golden = CellGolden {
            source: opts.golden.clone(),
            inputs: opts.inputs.clone(),
            asked_inputs: None,
        };
        return Ok((golden, dir.display().to_string()));
    }
    let Some(reference) = opts.golden.reference.clone() else {
        return Err(bad_flag(
            "matrix needs the float model (--reference FP32.onnx) or a golden run (--golden DIR): the variants do not share a derived reference",
        ));
    };
    let dir = work.join("golden");
    crate::commands::compare::golden::run_golden_create(&crate::commands::compare::golden::GoldenOptions {
        model: reference.clone(),
        out: dir.clone(),
        force: false,
        inputs: opts.inputs.clone(),
        exec: opts.exec.clone(),
        layers: false,
    })?;
    // The golden directory supplies the inputs from now on (compare refuses both).
    let golden = CellGolden {
        source: GoldenSource {
            stored: Some(dir),
            ..opts.golden.clone()
        },
        inputs: InputOptions {
            samples: 1,
            ..InputOptions::default()
        },
        asked_inputs: Some(opts.inputs.clone()),
    };
    Ok((golden, reference.display().to_string()))
}

fn variant_infos(variants: &[Variant]) -> Result<Vec<VariantInfo>> {
    variants
        .iter()
        .map(|v| {
            let model = crate::data::model::load_model(&v.path)?;
            let all: Vec<(String, String)> = v.options.iter().map(|(_, k, val)| (k.clone(), val.clone())).collect();
            let (precision, cost_rank) = choose::precision_class(&model.proto, &all);
            Ok(VariantInfo {
                name: v.name.clone(),
                path: v.path.display().to_string(),
                sha256: model.sha256.clone(),
                size_bytes: model.total_bytes(),
                precision: precision.into(),
                cost_rank,
                options: v
                    .options
                    .iter()
                    .map(|(ep, k, val)| match ep {
                        Some(ep) => format!("{ep}:{k}={val}"),
                        None => format!("{k}={val}"),
                    })
                    .collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::target::Chipset;

    /// Without `-t`, the columns are what `compare` runs without `-t`: every target this machine
    /// can run, every QNN chipset included.
    #[test]
    fn no_target_means_every_target_this_machine_can_run() {
        let columns: Vec<String> = expand_targets(&[]).unwrap().into_iter().map(|s| s.id).collect();
        let compare: Vec<String> = crate::execution::exec::selection::default_specs()
            .into_iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(columns, compare);
        assert!(columns.iter().any(|c| c == "cpu"), "{columns:?}");
        let chipsets = columns.iter().filter(|c| c.starts_with("qnn:")).count();
        if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
            assert_eq!(chipsets, crate::data::target::CHIPSETS.len(), "{columns:?}");
        }
    }

    #[test]
    fn variant_options_go_to_the_npu_unless_an_ep_is_named() {
        let v = Variant::parse("fp16=m.onnx,enable_htp_fp16_precision=1,session.x=2,openvino:precision=FP16").unwrap();
        assert_eq!(v.name, "fp16");
        assert_eq!(v.path, PathBuf::from("m.onnx"));
        let chip: Chipset = crate::data::target::CHIPSETS[0];
        let kv = |k: &str, val: &str| (k.to_string(), val.to_string());
        assert_eq!(
            v.options_for(&Backend::Qnn(chip)),
            [kv("enable_htp_fp16_precision", "1"), kv("session.x", "2")]
        );
        assert_eq!(v.options_for(&Backend::Cpu), [kv("session.x", "2")]);
        assert_eq!(
            v.options_for(&Backend::OpenVino { device: "CPU".into() }),
            [kv("session.x", "2"), kv("precision", "FP16")]
        );
        for bad in [
            "m.onnx",
            "=m.onnx",
            "a b=m.onnx",
            "a=",
            "a=m.onnx,novalue",
            "a=m.onnx,gpu:k=v",
        ] {
            assert!(Variant::parse(bad).is_err(), "{bad}");
        }
    }
}
