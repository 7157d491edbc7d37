//! When a target's session over a set of taps (or isolated layers) fails, the failure may come
//! from one of them: an EP that cannot return some tensor, or refuses a layer on its own. The set
//! is split in halves and retried, level by level, until the items that make the session fail
//! are named; the rest are still measured. A timeout is not retried (each retry could take as
//! long). A few culprits cost about 2·log2(n) sessions each; the search stops after
//! 16 + 8·log2(n) sessions (when most items fail, they are not the cause one by one).

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::state::{result_of, State};
use crate::data::inputs::InputFile;
use crate::execution::exec::RunStatus;
use crate::execution::exec::{JobResult, Outcome};

/// A model over a subset of items, and the samples it takes.
pub(super) type Build<'b> = dyn FnMut(&[usize], &Path) -> Result<(PathBuf, Vec<Vec<InputFile>>)> + 'b;

/// What the retries returned: results covering the items that ran, and each item that made its
/// session fail with the error.
#[derive(Default)]
pub(super) struct Retried {
    pub results: Vec<JobResult>,
    pub failed: Vec<(usize, String)>,
    /// Whether the items were isolated one by one (false: every group failed, or a timeout).
    pub localised: bool,
}

/// Whether a failure is worth retrying in halves.
pub(super) fn retryable(o: &Outcome) -> bool {
    !matches!(o.status, RunStatus::Timeout | RunStatus::Ok | RunStatus::Unavailable)
}

/// Retries `items` on `target` in halves after `error`.
pub(super) fn retry_in_halves(
    state: &mut State<'_>,
    target: usize,
    items: &[usize],
    error: &str,
    build: &mut Build<'_>,
    dir: &Path,
) -> Result<Retried> {
    let mut out = Retried {
        localised: true,
        ..Default::default()
    };
    if items.len() < 2 {
        out.failed = items.iter().map(|&i| (i, error.to_string())).collect();
        return Ok(out);
    }
    let mut pending: Vec<Vec<usize>> = halves(items);
    let mut level = 0;
    let budget = 16 + 8 * (usize::BITS - items.len().leading_zeros()) as usize;
    let mut spent = 0;
    while !pending.is_empty() {
        if spent + pending.len() > budget {
            out.localised = false;
            out.failed
                .extend(pending.iter().flatten().map(|&i| (i, error.to_string())));
            break;
        }
        spent += pending.len();
        let threads = state.threads();
        let mut jobs = Vec::new();
        for (g, group) in pending.iter().enumerate() {
            let gdir = dir.join(format!("split{level}-{g}"));
            let (model, samples) = build(group, &gdir)?;
            if let Some(j) = state.target_job(target, &model, &samples, &gdir, threads) {
                jobs.push(j);
            }
        }
        let outcomes = state.run_jobs(&jobs)?;
        let mut next = Vec::new();
        for (group, o) in pending.iter().zip(&outcomes) {
            match result_of(o) {
                Ok(r) => out.results.push(r.clone()),
                Err(e) if group.len() == 1 || !retryable(o) => {
                    out.localised &= retryable(o);
                    out.failed.extend(group.iter().map(|&i| (i, e.clone())));
                }
                Err(_) => next.push(group.clone()),
            }
        }
        level += 1;
        pending = next.iter().flat_map(|g| halves(g)).collect();
    }
    Ok(out)
}

fn halves(items: &[usize]) -> Vec<Vec<usize>> {
    let mid = items.len().div_ceil(2);
    [&items[..mid], &items[mid..]]
        .into_iter()
        .filter(|h| !h.is_empty())
        .map(<[usize]>::to_vec)
        .collect()
}
