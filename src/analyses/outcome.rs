//! How each target's run ended: the worker's status, corrected when its execution provider took
//! no node (a silent fallback to the CPU is a failure of the target, not a result for it), with
//! the reason the runtime logged added to a generic failure.

use crate::execution::exec::{Outcome, PlannedTarget};
use crate::report::compare::PlacementSummary;
use crate::report::RunStatus;

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
                (Ok(_), Some(o)) => (o.status.into(), o.error.clone()),
                (Ok(_), None) => (RunStatus::Unavailable, Some("not run".into())),
            };
            let log = outcome.map(|o| o.log.clone()).unwrap_or_default();
            if status == RunStatus::Ok {
                if let Some(reason) = placement
                    .as_ref()
                    .and_then(|p| crate::analyses::placement::silent_fallback(p, ep, &log))
                {
                    status = RunStatus::Failed;
                    error = Some(reason);
                }
            } else if status == RunStatus::Failed {
                if let Some(e) = error.as_mut() {
                    crate::execution::exec::log::add_logged_reason(e, &log);
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
