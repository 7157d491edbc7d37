//! `npu-audit matrix`: every model variant (int8, a16w8, fp16 through EP options...) on every
//! target, each cell a `compare` target run against one golden run; the cheapest variant that
//! meets the policy per target, as a dispatch table; and, for variants that fail somewhere,
//! mixed-precision remedies built from the per-layer audit and proven by re-audit.

pub mod cells;
pub mod choose;
pub mod remedy;

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::audit::{run_compare, CompareOptions};
use crate::error::bad_flag;
use crate::report::model::Report;
use crate::target::{Backend, ReleaseSpec, TargetSpec};
use crate::userfile::Outputs;
use cells::Cell;
use choose::{Dispatch, Recommendation};
use remedy::{RemedyKind, RemedySearch};

/// The matrix output's layout version.
pub const MATRIX_SCHEMA_VERSION: u32 = 1;

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

/// Everything `matrix` was asked to do.
#[derive(Debug, Clone)]
pub struct MatrixOptions {
    pub variants: Vec<Variant>,
    /// Golden source, inputs, policy, execution; its model and targets are set per cell.
    pub audit: CompareOptions,
    /// `--cost`: the variants cheapest first (empty: by precision).
    pub cost: Vec<String>,
    pub remedies: RemedyOptions,
    /// When the matrix made the golden run from `--reference`: the inputs as asked, for the
    /// searches' per-layer audits, which run the reference model themselves on them (a stored
    /// golden run may lack activations they need). `None` with a golden run given: the per-layer
    /// audits use it, and so its inputs.
    pub asked_inputs: Option<crate::inputs::InputOptions>,
}

/// A variant as measured: its file, size and precision.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VariantInfo {
    pub name: String,
    pub path: String,
    pub sha256: String,
    /// The model and its external data, in bytes.
    pub size_bytes: u64,
    /// `int8`, `a16w8`, `fp16` (a float model with `enable_htp_fp16_precision=1`) or `fp32`.
    pub precision: String,
    /// The default cost rank of that precision (0 cheapest).
    pub cost_rank: u8,
    /// The options as given (`[EP:]KEY=VALUE`).
    pub options: Vec<String>,
}

/// What `matrix` found.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Matrix {
    pub schema_version: u32,
    pub tool_version: String,
    /// The golden directory or reference model every cell is measured against.
    pub reference: String,
    /// The limits of the policy, one `rule limit` each.
    pub policy: Vec<String>,
    /// The variants, cheapest first.
    pub cost_order: Vec<String>,
    pub variants: Vec<VariantInfo>,
    /// The targets as asked (columns).
    pub targets: Vec<String>,
    /// Every (variant, target), variants in cost order.
    pub cells: Vec<Cell>,
    pub recommendations: Vec<Recommendation>,
    pub dispatch: Dispatch,
    /// Mixed-precision searches for variants that fail the policy somewhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remedies: Vec<RemedySearch>,
    /// ONNX Runtime's intra-op threads in every session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intra_op_threads: Option<usize>,
    pub notes: Vec<String>,
    /// 0, or 1 when some target has no variant that meets the policy.
    pub exit_code: i32,
}

/// The JSON Schema of the matrix output (`docs/matrix.schema.json`, `npu-audit schema matrix`).
pub fn matrix_schema_text() -> String {
    crate::report::schema::schema_text(&crate::report::schema::derived_schema::<Matrix>(
        format!("npu-audit matrix, schema version {MATRIX_SCHEMA_VERSION}"),
        "The JSON of `npu-audit matrix --format json` (and `--out FILE`): derived from the types in src/matrix/. \
         Prose in docs/matrix.md.",
    ))
}

/// The targets as asked, expanded (`qnn:all`) and checked: one release each.
pub fn expand_targets(targets: &[String]) -> Result<Vec<TargetSpec>> {
    let specs = crate::target::parse_targets(targets)?;
    if specs.is_empty() {
        return Err(bad_flag("name at least one --target"));
    }
    if let Some(s) = specs.iter().find(|s| s.release == Some(ReleaseSpec::All)) {
        return Err(bad_flag(format!(
            "--target {}: a matrix column is one release; name it (@VERSION)",
            s.id
        )));
    }
    Ok(specs)
}

/// The target text of `spec` with `variant`'s options for it, and the id the audit gives it.
fn cell_target(spec: &TargetSpec, variant: &Variant) -> Result<(String, String)> {
    let mut text = spec.id.clone();
    for (k, v) in variant.options_for(&spec.backend) {
        text.push_str(&format!(",{k}={v}"));
    }
    let id = TargetSpec::parse_many(&text)?
        .into_iter()
        .next()
        .map(|s| s.id)
        .unwrap_or_else(|| text.clone());
    Ok((text, id))
}

/// Runs `model` (the variant's file or a candidate of it, `model_bytes` with its external data)
/// on `specs` with `variant`'s options in one `compare`, and returns each target's cell in
/// `specs` order, with the report.
pub fn audit_cells(
    opts: &MatrixOptions,
    variant: &Variant,
    (model, model_bytes): (&std::path::Path, u64),
    specs: &[TargetSpec],
    layers: Option<crate::layers::LayerOptions>,
) -> Result<(Vec<Cell>, Report)> {
    let mut targets = Vec::new();
    let mut ids = Vec::new();
    for spec in specs {
        let (text, id) = cell_target(spec, variant)?;
        targets.push(text);
        ids.push(id);
    }
    let mut audit = opts.audit.clone();
    if let (Some(_), Some(inputs)) = (&layers, &opts.asked_inputs) {
        audit.golden = None;
        audit.inputs = inputs.clone();
    }
    audit.model = model.to_path_buf();
    audit.targets = targets;
    audit.no_baseline = layers.is_none();
    audit.layers = layers;
    let report = run_compare(&audit, &mut Outputs::new(&[]))?;
    let cells = specs
        .iter()
        .zip(&ids)
        .filter_map(|(spec, id)| {
            let row = report.targets.iter().find(|t| t.id == *id)?;
            Some(cells::cell(&report, row, &variant.name, &spec.id, model_bytes))
        })
        .collect();
    Ok((cells, report))
}

/// The limits the gate applied, one `rule limit` per distinct pair (not the rule that a target
/// ran: a cell's status says that).
fn policy_lines(reports: &[Report]) -> Vec<String> {
    let set: BTreeSet<String> = reports
        .iter()
        .flat_map(|r| &r.gate.rules)
        .filter(|r| r.rule != "ran")
        .map(|r| format!("{} {}", r.rule, r.limit.0))
        .collect();
    set.into_iter().collect()
}

/// Runs the matrix: the golden run once, one `compare` per variant over every target, the
/// recommendations, then the remedy searches asked for.
pub fn run(opts: &MatrixOptions, specs: &[TargetSpec], outputs: &mut Outputs) -> Result<Matrix> {
    let work = crate::process::owned_tempdir("npu-audit-matrix-")?;
    let mut opts = opts.clone();
    // Every variant is read before anything runs: a bad model is refused at once.
    let variants = variant_infos(&opts.variants)?;
    let reference = golden_for_all(&mut opts, work.path())?;
    let order = choose::cost_order(&variants, &opts.cost);
    let mut cells = Vec::new();
    let mut reports = Vec::new();
    for info in order.iter().filter_map(|n| variants.iter().find(|v| v.name == *n)) {
        let Some(v) = opts.variants.iter().find(|v| v.name == info.name) else {
            continue;
        };
        crate::console::note(format!("matrix: variant {} on {} targets", v.name, specs.len()));
        let (c, report) = audit_cells(&opts, v, (&v.path, info.size_bytes), specs, None)?;
        cells.extend(c);
        reports.push(report);
        crate::interrupt::check()?;
    }
    let target_ids: Vec<String> = specs.iter().map(|s| s.id.clone()).collect();
    let mut recommendations = choose::recommend(&cells, &order, &target_ids);
    let policy = policy_lines(&reports);
    let dispatch = choose::dispatch(&recommendations, &cells, &variants, policy.clone());
    let remedies = remedy::search_all(&opts, specs, &cells, (&variants, &order), work.path(), outputs)?;
    choose::add_remedies(&mut recommendations, &remedies, &order);
    let mut notes = Vec::new();
    if policy.is_empty() {
        notes.push("no limits were set (--min-sqnr, --max-abs, --min-top1, a policy file): every cell that ran meets the policy, and the cheapest variant that runs is recommended".into());
    }
    let exit_code = i32::from(!policy.is_empty() && !dispatch.unresolved.is_empty());
    Ok(Matrix {
        schema_version: MATRIX_SCHEMA_VERSION,
        tool_version: env!("CARGO_PKG_VERSION").into(),
        reference,
        policy,
        cost_order: order,
        variants,
        targets: target_ids,
        cells,
        recommendations,
        dispatch,
        remedies,
        intra_op_threads: reports.iter().flat_map(|r| &r.targets).find_map(|t| t.intra_op_threads),
        notes,
        exit_code,
    })
}

/// Makes every cell compare against one golden run: the one given, or the reference model run
/// once into `work`. Returns how the report names it.
fn golden_for_all(opts: &mut MatrixOptions, work: &std::path::Path) -> Result<String> {
    if let Some(dir) = &opts.audit.golden {
        return Ok(dir.display().to_string());
    }
    let Some(reference) = opts.audit.reference.clone() else {
        return Err(bad_flag(
            "matrix needs the float model (--reference FP32.onnx) or a golden run (--golden DIR): the variants do not share a derived reference",
        ));
    };
    let dir = work.join("golden");
    crate::audit::golden::run_golden_create(&crate::audit::golden::GoldenOptions {
        model: reference.clone(),
        out: dir.clone(),
        force: false,
        inputs: opts.audit.inputs.clone(),
        exec: opts.audit.exec.clone(),
        layers: false,
    })?;
    opts.asked_inputs = Some(opts.audit.inputs.clone());
    opts.audit.golden = Some(dir);
    // The golden directory supplies the inputs from now on (compare refuses both).
    opts.audit.inputs = crate::inputs::InputOptions {
        samples: 1,
        seed: 0,
        ..Default::default()
    };
    Ok(reference.display().to_string())
}

fn variant_infos(variants: &[Variant]) -> Result<Vec<VariantInfo>> {
    variants
        .iter()
        .map(|v| {
            let model = crate::model::load_model(&v.path)?;
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
    use crate::target::Chipset;

    #[test]
    fn variant_options_go_to_the_npu_unless_an_ep_is_named() {
        let v = Variant::parse("fp16=m.onnx,enable_htp_fp16_precision=1,session.x=2,openvino:precision=FP16").unwrap();
        assert_eq!(v.name, "fp16");
        assert_eq!(v.path, PathBuf::from("m.onnx"));
        let chip: Chipset = crate::target::CHIPSETS[0];
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
