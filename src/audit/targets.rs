//! How each target ended and its row of the report.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use super::assemble;
use super::plan::PlannedTarget;
use crate::hash::sha256_file;
use crate::report::model::{ChipsetInfo, OutputMetrics, PlacementSummary, TargetReport};
use crate::runtime::Runtime;
use crate::worker::{Outcome, RunStatus};

/// How one target ended, after checking that its EP really ran the graph.
#[derive(Clone)]
pub struct TargetEnd<'o> {
    pub outcome: Option<&'o Outcome>,
    pub status: RunStatus,
    pub error: Option<String>,
    pub placement: Option<PlacementSummary>,
}

/// The end of every planned target; `job_of[i]` is the index of target i's outcome.
/// `placements[i]` is target i's analysed placement.
pub fn ends<'o>(
    planned: &[PlannedTarget],
    job_of: &[Option<usize>],
    outcomes: &'o [Outcome],
    placements: Vec<Option<PlacementSummary>>,
) -> Vec<TargetEnd<'o>> {
    planned
        .iter()
        .zip(job_of)
        .zip(placements)
        .map(|((t, job), placement)| {
            let outcome = job.map(|j| &outcomes[j]);
            let ep = t.spec.backend.ep_name();
            let (mut status, mut error) = match (&t.runtime, outcome) {
                (Err(reason), _) => (RunStatus::Unavailable, Some(reason.clone())),
                (Ok(_), Some(o)) => (o.status, o.error.clone()),
                (Ok(_), None) => (RunStatus::Unavailable, Some("not run".into())),
            };
            let log = outcome.map(|o| o.log.clone()).unwrap_or_default();
            if status == RunStatus::Ok {
                if let Some(reason) = placement.as_ref().and_then(|p| assemble::silent_fallback(p, ep, &log)) {
                    status = RunStatus::Failed;
                    error = Some(reason);
                }
            } else if status == RunStatus::Failed {
                if let Some(e) = error.as_mut() {
                    assemble::add_logged_reason(e, &log);
                }
            }
            TargetEnd {
                outcome,
                status,
                error,
                placement,
            }
        })
        .collect()
}

/// The report rows of every target; `metrics` holds the comparison of each target that ran, by id.
pub fn reports(
    planned: &[PlannedTarget],
    ends: &[TargetEnd<'_>],
    mut metrics: HashMap<String, Vec<OutputMetrics>>,
    logs: &HashMap<String, PathBuf>,
) -> Vec<TargetReport> {
    let mut hashes: HashMap<PathBuf, Option<String>> = HashMap::new();
    let mut hash = |rt: &Runtime| -> Option<String> {
        if rt.sha256.is_some() {
            return rt.sha256.clone();
        }
        hashes
            .entry(rt.library.clone())
            .or_insert_with(|| sha256_file(&rt.library).ok())
            .clone()
    };
    planned
        .iter()
        .zip(ends)
        .map(|(t, end)| {
            let outputs = if end.status == RunStatus::Ok {
                metrics.remove(&t.spec.id).unwrap_or_default()
            } else {
                vec![]
            };
            let mut options: BTreeMap<String, String> = t.spec.ep_options().into_iter().collect();
            options.extend(
                t.spec
                    .options
                    .iter()
                    .filter(|(k, _)| k.starts_with("session."))
                    .cloned(),
            );
            let outcome = end.outcome;
            TargetReport {
                id: t.spec.id.clone(),
                ep: t.spec.backend.ep_name().into(),
                role: t.role,
                required: t.required,
                chipset: t.spec.chipset().map(|c| ChipsetInfo {
                    sm: c.sm.to_uppercase(),
                    name: format!("Snapdragon {}", c.marketing),
                    soc_model: c.soc_model,
                    htp_arch: c.htp_arch,
                }),
                options,
                runtime: t
                    .runtime
                    .as_ref()
                    .ok()
                    .map(|rt| assemble::target_runtime_info(rt, outcome, &mut hash)),
                status: end.status,
                error: end.error.clone(),
                failed_at: outcome
                    .and_then(|o| o.result.as_ref())
                    .filter(|r| !r.ok)
                    .map(|r| r.phase),
                timing: outcome.and_then(assemble::timing),
                placement: end.placement.clone(),
                log: logs.get(&t.spec.id).map(|p| p.display().to_string()),
                fingerprint: None,
                determinism: None,
                drift_explanations: vec![],
                layers: vec![],
                layer_summary: None,
                outputs,
            }
        })
        .collect()
}
