//! The end of a repro: the whole-model run when no layer departs alone, the bundle cut, run alone
//! (and scrubbed), its files, and the report.

use std::path::Path;

use anyhow::Result;

use super::bundle::zip_bytes;
use super::graph::{Layered, Window};
use super::search::one_smaller;
use super::windows::{Evaluator, Judged};
use super::windows::{COMPARISON_FAILS, SUBGRAPH};
use super::{describe, runtime_problem, AgainstChoice, ReproOptions};
use crate::analyses::layers::state::result_of;
use crate::analyses::layers::tap::tapped;
use crate::commands::compare::plan::AuditPlan;
use crate::data::model::rewrite::write_model;
use crate::foundation::error::ExitCode;
use crate::foundation::userfile::Outputs;
use crate::report::repro::{CandidateReport, ReproReport, ReproStatus, StartPoint, WindowReport, REPRO_SCHEMA_VERSION};

/// The report of a run whose target or comparison cannot run here (exit 3), else `None`.
pub(super) fn unavailable(opts: &ReproOptions, plan: &AuditPlan) -> Option<ReproReport> {
    let problems: Vec<String> = plan.targets.iter().filter_map(runtime_problem).collect();
    if problems.is_empty() {
        return None;
    }
    let mut report = empty_report(opts, plan, ReproStatus::TargetDidNotRun);
    report.notes.extend(problems);
    report.exit_code = repro_exit(false, true);
    Some(report)
}

/// A repro's exit code through the one mapping every audit uses: its gate passes when a window
/// that departs was cut out (0), fails when none was (1); a target or comparison that did not
/// run wins (3).
fn repro_exit(reproduced: bool, did_not_run: bool) -> ExitCode {
    crate::judge::gate::exit_code(did_not_run, crate::report::gate::Verdict::judged(!reproduced))
}

/// The report before anything is found.
fn empty_report(opts: &ReproOptions, plan: &AuditPlan, status: ReproStatus) -> ReproReport {
    ReproReport {
        schema_version: REPRO_SCHEMA_VERSION,
        kind: crate::report::common::ReportKind::Repro,
        tool: crate::report::common::ToolInfo::this(),
        model: plan.model.path.display().to_string(),
        model_sha256: plan.model.sha256.clone(),
        reference: match &plan.reference {
            crate::commands::compare::reference::ReferencePlan::Model { description, .. } => description.clone(),
            crate::commands::compare::reference::ReferencePlan::Stored { description, .. } => description.clone(),
        },
        target: super::files::side(&plan.targets[0]),
        against: match &opts.against {
            AgainstChoice::Golden => super::files::golden_side(),
            AgainstChoice::Target(_) => super::files::side(&plan.targets[1]),
        },
        criterion: opts.criterion.clone(),
        status,
        start: None,
        candidates_tried: 0,
        sessions: 0,
        window: None,
        minimality: Vec::new(),
        closest: None,
        bundle: None,
        host: crate::foundation::host::this_host().into(),
        notes: plan.notes.iter().cloned().chain(derived_note(plan)).collect(),
        exit_code: repro_exit(false, false),
    }
}

/// With a reference derived from the model: what its activations lack.
fn derived_note(plan: &AuditPlan) -> Option<String> {
    match &plan.reference {
        crate::commands::compare::reference::ReferencePlan::Model { kind: "derived", .. } => Some(
            "the reference is derived from the model (its activation Q/DQ pairs removed): a clip the quantization performs \
             (a ReLU folded into a zero point) is missing from its activations, so SQNR figures and --against golden \
             understate the quantized model; give the float model with --reference"
                .into(),
        ),
        _ => None,
    }
}

/// The whole model run with every layer's output exposed on both sides: the first layer whose
/// output departs (`first_cumulative_departure`), or the last layer when the target refuses the
/// whole model and the comparison does not (`whole_model_failure`).
pub(super) fn whole_model(eval: &mut Evaluator<'_>) -> Result<Option<(usize, &'static str)>> {
    let layered = eval.layered;
    let taps: Vec<String> = (0..layered.layers.len())
        .map(|k| layered.point(k).tensor.clone())
        .collect();
    let dir = eval.executor.work().join("repro").join("whole");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("tapped.onnx");
    write_model(&tapped(&layered.proto, &taps), eval.model, &path)?;
    let samples = eval.input_files.to_vec();
    let (target, against) = eval.run_model(&path, &samples, &dir)?;
    let against_ok = against.as_ref().is_none_or(|a| result_of(a).is_ok());
    let (t, a) = match (result_of(&target), against.as_ref().map(result_of)) {
        (Ok(t), None) => (t, None),
        (Ok(t), Some(Ok(a))) => (t, Some(a)),
        (Err(_), _) if against_ok => return Ok(Some((layered.layers.len() - 1, "whole_model_failure"))),
        (_, Some(Err(e))) => {
            eval.notes.push(format!("{COMPARISON_FAILS} the whole model ({e})"));
            return Ok(None);
        }
        _ => return Ok(None),
    };
    for (k, tensor) in taps.iter().enumerate() {
        for s in 0..samples.len() {
            let (out, any) = eval.measure_outputs(std::slice::from_ref(tensor), s, s, t, a, &|n| n.to_string())?;
            if any && !out.is_empty() {
                return Ok(Some((k, "first_cumulative_departure")));
            }
        }
    }
    Ok(None)
}

/// The report of a finished search; the bundle staged in `outputs` when it reproduces and
/// `--out` names where it goes.
pub(super) fn finish(
    opts: &ReproOptions,
    plan: &AuditPlan,
    eval: &mut Evaluator<'_>,
    start: Option<StartPoint>,
    window: Option<Window>,
    outputs: &mut Outputs,
) -> Result<ReproReport> {
    let layered = eval.layered;
    let mut report = empty_report(opts, plan, ReproStatus::NoDeparture);
    report.start = start.clone();
    report.notes.append(&mut eval.notes);
    let Some(window) = window else {
        return no_window(report, eval, start.as_ref());
    };
    let smaller = one_smaller(window);
    eval.judge(&smaller)?;
    report.minimality = smaller
        .iter()
        .map(|w| candidate(layered, *w, &eval.judged[w]))
        .collect();
    let judged = eval.judged[&window].clone();
    report.window = Some(window_report(layered, window, &judged));
    let made = super::files::make(opts, plan, eval, window, &judged)?;
    report.bundle = Some(made.report.clone());
    if made.report.reproduces {
        report.status = ReproStatus::Reproduced;
        report.exit_code = repro_exit(true, false);
        if let Some(dest) = &opts.bundle {
            if let Some(b) = report.bundle.as_mut() {
                b.path = dest.display().to_string();
            }
            let json = serde_json::to_string_pretty(&shareable(counted(report.clone(), eval)))? + "\n";
            stage(outputs, dest, made.files, json)?;
        }
    } else {
        report.status = ReproStatus::NotReproduced;
        report.notes.push(format!(
            "the window {} departs inside the model but its bundle, run alone, does not: nothing was written",
            describe(layered, window)
        ));
    }
    Ok(counted(report, eval))
}

/// The report with the search's counts.
fn counted(mut report: ReproReport, eval: &Evaluator<'_>) -> ReproReport {
    report.candidates_tried = eval.judged.len();
    report.sessions = eval.sessions;
    report
}

/// The report when no window departs: the comparison did not run (exit 3), the start cannot be
/// cut (exit 2), or nothing departs (exit 1, with the closest window and what could not be
/// judged).
fn no_window(mut report: ReproReport, eval: &Evaluator<'_>, start: Option<&StartPoint>) -> Result<ReproReport> {
    let layered = eval.layered;
    let mut errors: Vec<(&Window, &str)> = eval
        .judged
        .iter()
        .filter_map(|(w, j)| Some((w, j.error.as_deref()?)))
        .collect();
    errors.sort();
    let judged = eval.judged.values().filter(|j| j.error.is_none()).count();
    if judged == 0 && !errors.is_empty() && errors.iter().all(|(_, e)| e.starts_with(COMPARISON_FAILS)) {
        report.status = ReproStatus::TargetDidNotRun;
        report.exit_code = repro_exit(false, true);
        report
            .notes
            .push(format!("{} did not run: {}", report.against.id, errors[0].1));
        return Ok(counted(report, eval));
    }
    if let Some(s) = start {
        let own = (s.layer.position, s.layer.position);
        if let Some(e) = eval
            .judged
            .get(&own)
            .and_then(|j| j.error.as_deref())
            .filter(|e| e.contains(SUBGRAPH))
        {
            return Err(crate::foundation::error::bad_model(format!(
                "{} cannot be cut out of the model: {e}",
                describe(layered, own)
            )));
        }
    }
    report.closest = closest(eval, start);
    report.notes.push(no_departure_note(layered, start));
    if let Some((w, e)) = errors.first() {
        report.notes.push(format!(
            "{} window(s) could not be judged; the first, {}: {e}",
            errors.len(),
            describe(layered, **w)
        ));
    }
    Ok(counted(report, eval))
}

/// Why nothing was reproduced, in one sentence.
fn no_departure_note(layered: &Layered, start: Option<&StartPoint>) -> String {
    match start {
        None => "no layer departs, alone or in the whole model".into(),
        Some(s) => format!(
            "{} departs ({}) but no window ending there departs when fed the golden run's activations",
            describe(layered, (s.layer.position, s.layer.position)),
            s.reason.replace('_', " ")
        ),
    }
}

/// With nothing departing: the start window when there is one, else the judged window that
/// came closest (the most steps or the largest error, then the most differing elements, then the
/// earliest).
fn closest(eval: &Evaluator<'_>, start: Option<&StartPoint>) -> Option<CandidateReport> {
    let severity = |j: &Judged| {
        let worst = j
            .outputs
            .iter()
            .map(|o| o.max_steps.map_or(o.max_abs.0, |s| s as f64))
            .fold(0.0, f64::max);
        let differing: u64 = j.outputs.iter().map(|o| o.differing).sum();
        (worst, differing)
    };
    let mut all: Vec<(&Window, &Judged)> = eval.judged.iter().filter(|(_, j)| j.error.is_none()).collect();
    all.sort_by_key(|(w, _)| **w);
    let at_start = start.and_then(|s| {
        let w = (s.layer.position, s.layer.position);
        all.iter().find(|(x, _)| **x == w).copied()
    });
    let best = at_start.or_else(|| {
        all.iter().copied().reduce(|best, next| {
            let (a, b) = (severity(best.1), severity(next.1));
            if b.0 > a.0 || (b.0 == a.0 && b.1 > a.1) {
                next
            } else {
                best
            }
        })
    })?;
    Some(candidate(eval.layered, *best.0, best.1))
}

/// A judged window as the report lists it.
fn candidate(layered: &Layered, (a, b): Window, j: &Judged) -> CandidateReport {
    CandidateReport {
        first: layered.layer_ref(a),
        last: layered.layer_ref(b),
        layers: b - a + 1,
        departs: j.departs,
        error: j.error.clone(),
        target_fails: j.target_fails,
        outputs: j.outputs.clone(),
    }
}

fn window_report(layered: &Layered, (a, b): Window, j: &Judged) -> WindowReport {
    let unit = layered.unit((a, b));
    WindowReport {
        first: layered.layer_ref(a),
        last: layered.layer_ref(b),
        layers: (a..=b).map(|k| layered.layer_ref(k)).collect(),
        nodes: unit.nodes.len(),
        inputs: unit.inputs.clone(),
        target_fails: j.target_fails,
        error: j.error.clone(),
        outputs: j.outputs.clone(),
        sample: j.worst_sample,
    }
}

/// The report as the bundle carries it to a vendor: no path of this machine in it (the model,
/// the reference and the bundle by their file names; each runtime by its package, version, file
/// name and SHA-256, not where it sits in the user's cache).
fn shareable(mut report: ReproReport) -> ReproReport {
    let name = |p: &str| {
        Path::new(p)
            .file_name()
            .map_or_else(|| p.to_string(), |n| n.to_string_lossy().into_owned())
    };
    report.model = name(&report.model);
    report.reference = name(&report.reference);
    if let Some(b) = report.bundle.as_mut() {
        b.path = name(&b.path);
    }
    for side in [&mut report.target, &mut report.against] {
        side.runtime = side.runtime.take().map(|r| r.without_paths());
    }
    report
}

/// Stages the bundle: a zip file, or a new (or empty) directory with its files.
fn stage(outputs: &mut Outputs, dest: &Path, files: Vec<(String, Vec<u8>)>, json: String) -> Result<()> {
    let mut files = files;
    files.push(("repro.json".into(), json.into_bytes()));
    if is_zip(dest) {
        return outputs.new_file("--out", dest, &zip_bytes(&files)?);
    }
    outputs.dir("--out", dest)?;
    outputs.dir("--out", &dest.join("expected"))?;
    for (name, bytes) in &files {
        outputs.new_file("--out", &dest.join(name), bytes)?;
    }
    Ok(())
}

/// Whether the bundle is to be a zip file (a name ending in `.zip`, `.zip` itself included).
pub fn is_zip(dest: &Path) -> bool {
    dest.file_name()
        .is_some_and(|n| n.to_string_lossy().to_ascii_lowercase().ends_with(".zip"))
}
