//! `npu-audit triage`: what users' devices sent in, reproduced here. Each report's outputs are
//! compared with the same inputs run on the fp32 golden run, on the CPU EP (`cpu`, `cpu:noopt`)
//! and on the HTP simulation of every chipset (and of the QNN release the device names, when the
//! catalogue has it); the comparison decides one verdict per report, and over a fleet the rule
//! that separates a quantization problem (drift on every chipset, as large on the CPU EP), an
//! NPU/runtime problem (drift concentrated on some chipsets) and a device problem (outliers
//! within one chipset).
//!
//! Simulation work grows with the distinct input sets, not with reports: reports are grouped by
//! their inputs and every group is one audit of every candidate.

pub mod fleet;
pub mod phone_cpu;
pub mod reproduce;
pub mod store;
pub mod verdict;

use std::path::PathBuf;

use anyhow::Result;

use crate::commands::compare::Audited;
use crate::data::device::{DeviceReport, ReportDefaults};
use crate::data::target::{distinct, TargetList};
use crate::execution::exec::ExecOptions;
use crate::foundation::userfile::{InputFiles, Reads};

pub use crate::report::triage::Fleet;
pub use crate::report::triage::{CandidateDistance, OutputFigures, Verdict, VerdictKind};
pub use crate::report::triage::{CandidateRun, ReportEntry, StoreUse, Thresholds, Triage, TRIAGE_SCHEMA_VERSION};

/// What `triage` is asked.
#[derive(Debug, Clone)]
pub struct TriageOptions {
    /// Report paths; a directory that is not one report is a fleet of them.
    pub reports: Vec<PathBuf>,
    /// The model the devices ran, its golden run or reference, the default inputs.
    pub audited: Audited,
    pub exec: ExecOptions,
    pub defaults: ReportDefaults,
    /// Targets every report is compared with besides its own chipset.
    pub candidates: Vec<TargetList>,
    pub thresholds: Thresholds,
    /// Whether a report nearest a CPU EP is also compared with the phone's own ARM64 CPU EP, on
    /// the cores of its chipset (`--no-arm64` turns it off).
    pub phone_cpu: bool,
    /// The store that makes triage incremental (`None`: `--no-db`).
    pub db: Option<PathBuf>,
}

impl Reads for TriageOptions {
    fn declare(&self, set: &mut InputFiles) {
        let TriageOptions {
            reports,
            audited,
            exec,
            defaults: _,
            candidates: _,
            thresholds: _,
            phone_cpu: _,
            db,
        } = self;
        set.with(audited).with(exec).add_all(db);
        for r in reports {
            set.add(r).add_all(&crate::data::device::companion_files(r));
        }
    }
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            rounding_steps: 2,
            excess_db: 3.0,
            outlier_db: 6.0,
            min_sqnr_db: None,
        }
    }
}

/// Every report path: files and report directories as given, fleet directories expanded.
fn report_paths(opts: &TriageOptions) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in &opts.reports {
        if p.is_dir() && !crate::data::device::is_single_report(p) {
            out.extend(crate::data::device::fleet_entries(p)?);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// The shape of each input as the default inputs have it (the golden run's first sample, or what
/// `--inputs`/`--gen` give), for raw input files of a model with dynamic dimensions.
fn input_shapes(
    opts: &TriageOptions,
    sig: &crate::data::model::Signature,
) -> std::collections::HashMap<String, Vec<usize>> {
    match &opts.audited.golden.stored {
        Some(dir) => sig
            .inputs
            .iter()
            .enumerate()
            .filter_map(|(k, info)| {
                let file = dir.join("inputs").join("s0").join(format!("i{k}.npy"));
                let (_, shape) = crate::data::tensor::read_npy_header(&file).ok()?;
                Some((info.name.clone(), shape))
            })
            .collect(),
        None => crate::data::inputs::prepare(sig, &opts.audited.inputs)
            .map(|set| set.shapes())
            .unwrap_or_default(),
    }
}

/// Reads every report (malformed ones kept as their error).
fn parse_reports(
    opts: &TriageOptions,
    sig: &crate::data::model::Signature,
) -> Result<Vec<(PathBuf, Result<DeviceReport, String>)>> {
    let defaults = ReportDefaults {
        input_shapes: input_shapes(opts, sig),
        ..opts.defaults.clone()
    };
    let mut parsed: Vec<(PathBuf, Result<DeviceReport, String>)> = report_paths(opts)?
        .into_iter()
        .map(|p| {
            let r = crate::data::device::read_report(&p, sig, &defaults).map_err(|e| format!("{e:#}"));
            (p, r)
        })
        .collect();
    reproduce::fold_default_inputs(opts, sig, &mut parsed);
    Ok(parsed)
}

/// The store's contexts for this triage: (store, run context, entry context).
fn open_store(
    opts: &TriageOptions,
    model_sha256: &str,
    reference: &str,
) -> Result<Option<(store::Store, String, String)>> {
    let Some(path) = &opts.db else { return Ok(None) };
    // The default store is the user's own file: never through a link, and its directory is made.
    let at_default = store::default_path().as_ref() == Some(path);
    if let Some(dir) = path.parent().filter(|d| at_default && !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            crate::foundation::error::run_error(format!(
                "cannot make the triage store's directory {}: {e}",
                dir.display()
            ))
        })?;
    }
    let db = store::Store::open(path, true, at_default)?;
    let run_ctx = store::run_context(opts, model_sha256)?;
    let entry_ctx = store::entry_context(opts, &run_ctx)?;
    db.record_context(&entry_ctx, opts, model_sha256, reference)?;
    Ok(Some((db, run_ctx, entry_ctx)))
}

/// Every report's entry: read back from the store when it has one, else triaged now (and kept).
fn triage_entries(
    opts: &TriageOptions,
    parsed: &[(PathBuf, Result<DeviceReport, String>)],
    steps: &[Option<f64>],
    db: Option<&mut (store::Store, String, String)>,
) -> Result<(Vec<ReportEntry>, Vec<reproduce::Group>, Option<StoreUse>)> {
    let mut known: Vec<Option<ReportEntry>> = Vec::with_capacity(parsed.len());
    for (path, r) in parsed {
        let hit = match (r, db.as_deref()) {
            (Ok(report), Some((s, _, ctx))) => s.entry(ctx, &report.content_sha256)?.map(|mut e| {
                e.path = path.display().to_string();
                e
            }),
            _ => None,
        };
        known.push(hit);
    }
    let todo: Vec<&(PathBuf, Result<DeviceReport, String>)> = parsed
        .iter()
        .zip(&known)
        .filter(|(_, k)| k.is_none())
        .map(|(p, _)| p)
        .collect();
    let todo_reports: Vec<&DeviceReport> = todo.iter().filter_map(|(_, r)| r.as_ref().ok()).collect();
    if let Some((s, _, _)) = db.as_deref().filter(|_| !todo_reports.is_empty()) {
        // What is triaged now is kept: a store that may only be read is said before any work.
        s.writable()?;
    }
    let cache = db.as_deref().map(|(s, run_ctx, _)| reproduce::RunCache {
        store: s,
        context: run_ctx,
    });
    let (mut groups, mut counts) = reproduce::run_groups(opts, &todo_reports, cache.as_ref())?;
    let mut fresh = verdict::entries(&todo, &groups, steps, &opts.thresholds, &opts.candidates);
    let not_to_keep = match opts.phone_cpu {
        true => phone_cpu::follow_up(
            opts,
            &todo,
            &mut groups,
            &mut fresh,
            (steps, cache.as_ref(), &mut counts),
        )?,
        false => Vec::new(),
    };
    let mut fresh = fresh.into_iter();
    let triaged_now: Vec<bool> = known.iter().map(Option::is_none).collect();
    let from_store = triaged_now.iter().filter(|now| !**now).count();
    let entries: Vec<ReportEntry> = known.into_iter().filter_map(|k| k.or_else(|| fresh.next())).collect();
    let store_use = match db {
        Some((s, _, ctx)) => {
            let new: Vec<&ReportEntry> = entries
                .iter()
                .zip(&triaged_now)
                .filter(|(e, now)| **now && e.verdict.kind != VerdictKind::NotReproduced)
                .filter(|(e, _)| !e.content_sha256.as_ref().is_some_and(|h| not_to_keep.contains(h)))
                .map(|(e, _)| e)
                .collect();
            s.put_entries(ctx, &new)?;
            Some(StoreUse {
                path: s.path.display().to_string(),
                reports_from_store: from_store,
                reports_triaged: entries.len() - from_store,
                runs_from_store: counts.reused,
                runs_made: counts.made,
            })
        }
        None => None,
    };
    Ok((entries, groups, store_use))
}

/// Runs the triage.
pub fn run(opts: &TriageOptions) -> Result<Triage> {
    let model = crate::data::model::load_model(&opts.audited.model)?;
    let sig = crate::data::model::Signature::of(&model)?;
    let parsed = parse_reports(opts, &sig)?;
    let graph = model.proto.graph.as_ref();
    let steps = graph.map_or_else(
        || vec![None; sig.outputs.len()],
        |g| crate::data::model::constant::output_steps(g, &sig.outputs),
    );
    let model_sha256 = crate::foundation::hash::sha256_file(&opts.audited.model)?;
    let reference = reference_text(opts);
    let mut db = open_store(opts, &model_sha256, &reference)?;
    let (mut reports, groups, store) = triage_entries(opts, &parsed, &steps, db.as_mut())?;
    verdict::mark_duplicates(&mut reports);
    let fleet = (reports.len() > 1).then(|| fleet::analyse(&reports, &opts.thresholds));
    let mut candidate_runs: Vec<CandidateRun> = groups.iter().flat_map(|g| g.runs.clone()).collect();
    if let Some((s, run_ctx, _)) = &db {
        candidate_runs = s.runs_of_inputs(run_ctx, &input_keys(&reports))?;
    }
    // Per input set, the candidates in the order asked, then the releases devices named.
    let asked: Vec<String> = distinct(&opts.candidates).into_iter().map(|t| t.id).collect();
    let rank = |r: &CandidateRun| asked.iter().position(|id| *id == r.target).unwrap_or(asked.len());
    candidate_runs.sort_by(|a, b| (&a.inputs, rank(a), &a.target).cmp(&(&b.inputs, rank(b), &b.target)));
    Ok(Triage {
        schema_version: TRIAGE_SCHEMA_VERSION,
        kind: crate::report::common::ReportKind::Triage,
        tool: crate::report::common::ToolInfo::this(),
        host: Some(crate::foundation::host::this_host().into()),
        model: opts.audited.model.display().to_string(),
        model_sha256,
        reference,
        intra_op_threads: opts
            .exec
            .threads
            .unwrap_or(crate::execution::exec::executor::DEFAULT_INTRA_OP_THREADS),
        thresholds: opts.thresholds.clone(),
        candidate_runs,
        reports,
        fleet,
        store,
        notes: groups.iter().flat_map(|g| g.notes.clone()).collect(),
    })
}

fn reference_text(opts: &TriageOptions) -> String {
    let golden = &opts.audited.golden;
    golden
        .stored
        .as_ref()
        .or(golden.reference.as_ref())
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// The input sets the entries were measured on.
fn input_keys(reports: &[ReportEntry]) -> Vec<String> {
    let keys: std::collections::BTreeSet<String> = reports.iter().filter_map(|e| e.inputs.clone()).collect();
    keys.into_iter().collect()
}

/// `triage --summary`: what the store holds, per context (model, reference, thresholds), most
/// recently used first; each as a triage of its stored reports, with the fleet analysed again.
pub fn summary(db: &std::path::Path, model_sha256: Option<&str>) -> Result<Vec<Triage>> {
    let s = store::Store::open(db, false, false)?;
    let mut out = Vec::new();
    for c in s.contexts()? {
        if model_sha256.is_some_and(|m| m != c.model_sha256) {
            continue;
        }
        let mut reports = s.entries(&c.context)?;
        if reports.is_empty() {
            continue;
        }
        verdict::mark_duplicates(&mut reports);
        let fleet = (reports.len() > 1).then(|| fleet::analyse(&reports, &c.thresholds));
        out.push(Triage {
            schema_version: TRIAGE_SCHEMA_VERSION,
            kind: crate::report::common::ReportKind::Triage,
            tool: crate::report::common::ToolInfo {
                name: crate::report::common::TOOL_NAME.into(),
                version: c.tool_version,
            },
            // The store keeps a context per host class (the class is part of its hash), not the
            // host itself.
            host: None,
            model: c.model,
            model_sha256: c.model_sha256,
            reference: c.reference,
            intra_op_threads: c.intra_op_threads,
            thresholds: c.thresholds,
            candidate_runs: Vec::new(),
            reports,
            fleet,
            store: None,
            notes: Vec::new(),
        });
    }
    Ok(out)
}
