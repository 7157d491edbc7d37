//! One run of an eval as its report reads it: the records in sample order, how it ended, and
//! what its sessions said of themselves. A shard's file keeps one per unit; `merge` joins them.

use serde::{Deserialize, Serialize};

use super::feed::RunRecords;
use super::RunEnd;
use crate::analyses::accuracy::Record;
use crate::execution::exec::PlannedTarget;
use crate::report::compare::RuntimeInfo;

/// One run as the report reads it: its records (in sample order), how it ended, and what its
/// sessions said of themselves.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSummary {
    pub id: String,
    /// `None`: it answered every sample it was given.
    pub end: Option<RunEnd>,
    pub runtime: Option<RuntimeInfo>,
    pub intra_op_threads: Option<usize>,
    /// Every session's run time of every sample, in milliseconds.
    pub run_ms: Vec<f64>,
    pub records: Vec<Record>,
}

/// A run's summary: its records and end, and its runtime and times as its sessions reported them.
pub fn summary(planned: Option<&PlannedTarget>, run: RunRecords) -> RunSummary {
    RunSummary {
        runtime: planned.and_then(|p| runtime_info(p, &run)),
        intra_op_threads: run.results.first().and_then(|r| r.intra_threads),
        run_ms: run.results.iter().flat_map(|r| r.run_ms.iter().copied()).collect(),
        id: run.id,
        end: run.end,
        records: run.records,
    }
}

/// What a target ran with: its runtime as the worker's library reported itself.
fn runtime_info(planned: &PlannedTarget, run: &RunRecords) -> Option<RuntimeInfo> {
    let rt = planned.runtime.as_ref().ok()?;
    let outcome = run.results.first().map(|r| crate::execution::exec::Outcome {
        status: crate::execution::exec::RunStatus::Ok,
        error: None,
        result: Some(r.clone()),
        wall_ms: 0.0,
        log: std::path::PathBuf::new(),
    });
    Some(crate::commands::compare::facts::target_runtime_info(
        rt,
        outcome.as_ref(),
        &mut |r| r.sha256.clone(),
    ))
}
