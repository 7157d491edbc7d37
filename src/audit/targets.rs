//! Each target's row of the report.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use super::assemble;
use crate::exec::PlannedTarget;
use crate::exec::RunStatus;
use crate::hash::sha256_file;
use crate::outcome::TargetEnd;
use crate::report::model::{ChipsetInfo, OutputMetrics, TargetReport};
use crate::runtime::Runtime;

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
