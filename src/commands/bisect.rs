//! `npu-audit runtime bisect`: which runtime release first changed what a target outputs, and
//! where in the model. Every release between `--from` and `--to` runs the model in one audit
//! (each release is a target of its own: `qnn:sm8650@2.5.0`, ...) and is compared with `--from`
//! bit for bit; the first release that differs beyond the tolerance is then audited layer by
//! layer against the release before it, reusing the per-layer audit with that release as its
//! baseline.
//!
//! The releases are tried in order, not bisected by halves: outputs are not monotone in the
//! release (on the PP-OCR fixture 2.7.0 returns to 2.3.0's bytes after 2.4.0 .. 2.6.0 differ),
//! and there are a handful of releases.

use anyhow::Result;
use serde::Serialize;

use crate::analyses::layers::LayerOptions;
use crate::commands::compare::{run_compare, Audited, CompareOptions, Measured};
use crate::data::target::{ReleaseSpec, TargetSpec};
use crate::execution::exec::ExecOptions;
use crate::execution::runtime::catalog::{catalogue, version_order};
use crate::foundation::error::bad_flag;
use crate::foundation::userfile::{InputFiles, Outputs, Reads};
use crate::report::common::Num;
use crate::report::compare::{LayerPointer, Report};
use crate::report::RunStatus;

/// What `runtime bisect` is asked.
pub struct ReleaseBisectOptions {
    /// The model, golden run and inputs every release runs on.
    pub audited: Audited,
    pub exec: ExecOptions,
    /// The target, without a release.
    pub target: TargetSpec,
    pub from: String,
    pub to: String,
    /// A release differs when an element differs by more than this (`None`: any bit).
    pub max_abs: Option<f64>,
    /// The per-layer audit of the first differing release, when wanted.
    pub layers: Option<LayerOptions>,
}

impl Reads for ReleaseBisectOptions {
    fn declare(&self, set: &mut InputFiles) {
        let ReleaseBisectOptions {
            audited,
            exec,
            target: _,
            from: _,
            to: _,
            max_abs: _,
            layers,
        } = self;
        set.with(audited).with(exec).with(layers);
    }
}

/// One output of a release against `--from`'s.
#[derive(Debug, Clone, Serialize)]
pub struct OutputChange {
    pub output: String,
    pub elements: u64,
    /// Elements whose bits differ (`None`: the element types differ).
    pub differing: Option<u64>,
    pub max_abs: Num,
    /// The largest difference in quantization steps, when the output has one.
    pub max_steps: Option<u64>,
}

/// One release tried.
#[derive(Debug, Clone, Serialize)]
pub struct ReleaseStep {
    pub release: String,
    /// The target id it ran as.
    pub target: String,
    /// The runtime it ran on (`onnxruntime-qnn 2.6.0 on onnxruntime 1.32.0`).
    pub runtime: Option<String>,
    pub status: RunStatus,
    pub error: Option<String>,
    /// Its SQNR against the golden run, per output.
    pub sqnr_db: Vec<Num>,
    /// Against `--from` (empty for `--from` itself and for releases that did not run).
    pub changes: Vec<OutputChange>,
    /// Whether some output differs beyond the tolerance.
    pub differs: bool,
}

/// Where the first differing release departs from the release before it, layer by layer.
#[derive(Debug, Clone, Serialize)]
pub struct LayerFinding {
    /// The release it is compared with.
    pub against: String,
    pub first_code_difference: Option<LayerPointer>,
    pub first_beyond_rounding: Option<LayerPointer>,
    pub first_sqnr_loss: Option<LayerPointer>,
    /// Why the per-layer audit could not name a layer, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The findings of `runtime bisect`.
#[derive(Debug, Clone, Serialize)]
pub struct ReleaseBisection {
    pub target: String,
    pub from: String,
    pub to: String,
    pub tolerance: String,
    pub steps: Vec<ReleaseStep>,
    /// The first release (after `--from`) whose outputs differ beyond the tolerance.
    pub first_differing: Option<String>,
    pub layers: Option<LayerFinding>,
    pub notes: Vec<String>,
}

/// The releases of the target's build from `from` to `to`, in release order.
fn releases_between(opts: &ReleaseBisectOptions) -> Result<Vec<String>> {
    let family = crate::execution::runtime::family_of(&opts.target.backend);
    let all: Vec<String> = catalogue().releases(family).iter().map(|b| b.version.clone()).collect();
    for v in [&opts.from, &opts.to] {
        if !all.contains(v) {
            return Err(bad_flag(format!(
                "no release {v} of {family} in the catalogue (known: {})",
                all.join(", ")
            )));
        }
    }
    if version_order(&opts.from, &opts.to).is_ge() {
        return Err(bad_flag(format!(
            "--from {} must be an older release than --to {}",
            opts.from, opts.to
        )));
    }
    Ok(all
        .into_iter()
        .filter(|v| version_order(v, &opts.from).is_ge() && version_order(v, &opts.to).is_le())
        .collect())
}

fn target_at(spec: &TargetSpec, version: &str) -> TargetSpec {
    spec.clone().with_release(ReleaseSpec::Version {
        version: version.to_string(),
        host: None,
    })
}

/// Runs the audit on `targets`, with `layers` (and their baseline) when given.
fn audit(opts: &ReleaseBisectOptions, targets: Vec<TargetSpec>, layers: Option<LayerOptions>) -> Result<Report> {
    let audit = CompareOptions {
        measured: Measured {
            layers,
            ..Measured::outputs_only()
        },
        ..CompareOptions::findings(opts.audited.clone(), targets, opts.exec.clone())
    };
    run_compare(&audit, &mut Outputs::none())
}

/// Each release against `from` in `report`.
fn steps(report: &Report, ids: &[(String, String)], max_abs: Option<f64>) -> Vec<ReleaseStep> {
    let from_id = &ids[0].1;
    ids.iter()
        .map(|(release, id)| {
            let t = report.targets.iter().find(|t| &t.id == id);
            let changes: Vec<OutputChange> = if id == from_id {
                Vec::new()
            } else {
                report
                    .agreement
                    .iter()
                    .filter(|e| (&e.a == from_id && &e.b == id) || (&e.b == from_id && &e.a == id))
                    .map(|e| OutputChange {
                        output: e.output.clone(),
                        elements: e.elements,
                        differing: e.differing_elements,
                        max_abs: e.max_abs,
                        max_steps: e.code_differences.map(|c| c.max_steps),
                    })
                    .collect()
            };
            let differs = changes.iter().any(|c| match max_abs {
                Some(tol) => c.max_abs.0.is_nan() || c.max_abs.0 > tol,
                None => c.differing != Some(0),
            });
            ReleaseStep {
                release: release.clone(),
                target: id.clone(),
                runtime: t.and_then(|t| t.runtime.as_ref()).map(|r| r.text()),
                status: t.map_or(RunStatus::Unavailable, |t| t.status),
                error: t.and_then(|t| t.error.clone()),
                sqnr_db: t
                    .map(|t| t.outputs.iter().map(|o| o.sqnr_db).collect())
                    .unwrap_or_default(),
                changes,
                differs,
            }
        })
        .collect()
}

/// Runs the bisection.
pub fn bisect(opts: &ReleaseBisectOptions) -> Result<ReleaseBisection> {
    let releases = releases_between(opts)?;
    let specs: Vec<TargetSpec> = releases.iter().map(|v| target_at(&opts.target, v)).collect();
    let ids: Vec<(String, String)> = releases
        .iter()
        .zip(&specs)
        .map(|(v, spec)| (v.clone(), spec.id.clone()))
        .collect();
    let report = audit(opts, specs, None)?;
    let steps = steps(&report, &ids, opts.max_abs);
    let mut notes = report.notes.clone();
    if steps[0].status != RunStatus::Ok {
        notes.push(format!("--from {} did not run: nothing to compare with", opts.from));
    }
    let first = steps.iter().skip(1).find(|s| s.status == RunStatus::Ok && s.differs);
    let layers = match (first, &opts.layers) {
        (Some(f), Some(lo)) => Some(layer_finding(opts, &steps, f, lo)?),
        _ => None,
    };
    Ok(ReleaseBisection {
        target: opts.target.id.clone(),
        from: opts.from.clone(),
        to: opts.to.clone(),
        tolerance: match opts.max_abs {
            Some(t) => format!("an element more than {t} from --from's"),
            None => "any differing bit".into(),
        },
        first_differing: first.map(|f| f.release.clone()),
        steps,
        layers,
        notes,
    })
}

/// The per-layer audit of the first differing release against the last release before it that
/// ran.
fn layer_finding(
    opts: &ReleaseBisectOptions,
    steps: &[ReleaseStep],
    first: &ReleaseStep,
    lo: &LayerOptions,
) -> Result<LayerFinding> {
    let before = steps
        .iter()
        .take_while(|s| s.target != first.target)
        .filter(|s| s.status == RunStatus::Ok)
        .last()
        .unwrap_or(&steps[0]);
    let layers = LayerOptions {
        baseline: Some(before.target.clone()),
        ..lo.clone()
    };
    let targets = vec![
        target_at(&opts.target, &before.release),
        target_at(&opts.target, &first.release),
    ];
    let report = audit(opts, targets, Some(layers))?;
    let summary = report
        .targets
        .iter()
        .find(|t| t.id == first.target)
        .and_then(|t| t.layer_summary.clone());
    let problems = report.layer_audit.map(|l| l.problems).unwrap_or_default();
    Ok(LayerFinding {
        against: before.release.clone(),
        first_code_difference: summary.as_ref().and_then(|s| s.first_code_difference.clone()),
        first_beyond_rounding: summary.as_ref().and_then(|s| s.first_beyond_rounding.clone()),
        first_sqnr_loss: summary.as_ref().and_then(|s| s.first_sqnr_loss.clone()),
        error: summary
            .and_then(|s| s.error)
            .or_else(|| (!problems.is_empty()).then(|| problems.join("; "))),
    })
}
