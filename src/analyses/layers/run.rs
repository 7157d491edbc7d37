//! The per-layer audit's entry point: the stages run in order over the [`Context`] the
//! output-level audit hands over (what they share is in [`super::state`]).
//!
//! The stages: Plan ([`super::plan`]: points, matching, selection, sizing, runs within the tap
//! budget, isolation units), then per run Execute and Analyze ([`super::cumulative`],
//! [`super::isolated`]: sessions, retries in halves, accumulation), then Report (layer rows and
//! the summary of each target). Bisection ([`super::bisect`]) replaces the runs.

use std::collections::BTreeMap;

pub use super::state::Context;
use super::{LayerMode, LayerOptions, LayerResults};
use crate::report::compare::{LayerAuditInfo, LayerReport, TargetLayerSummary};

/// The common part of the report before anything ran.
fn blank_info(opts: &LayerOptions) -> LayerAuditInfo {
    LayerAuditInfo {
        mode: match (opts.mode, opts.selection.is_all()) {
            (LayerMode::Bisect, _) => "bisect".into(),
            (LayerMode::Tap, true) => "all".into(),
            (LayerMode::Tap, false) => "selected".into(),
        },
        points: 0,
        selected: 0,
        matched: 0,
        matched_by: BTreeMap::new(),
        unmatched: Vec::new(),
        divergence: opts.divergence,
        tap_runs: 0,
        sessions: 0,
        isolated: false,
        isolate_window: opts.isolate_window,
        seconds: 0.0,
        top: opts.top,
        problems: Vec::new(),
    }
}

/// The per-layer audit of either mode. Never fails: what goes wrong is in `info.problems`.
pub fn execute(ctx: &Context<'_>, opts: &LayerOptions) -> LayerResults {
    let mut info = blank_info(opts);
    let mut targets: Vec<Option<(Vec<LayerReport>, TargetLayerSummary)>> = vec![None; ctx.planned.len()];
    let planning = crate::foundation::timings::stage("layers: plan");
    let prepared = super::layout::prepare(ctx, opts, &mut info);
    drop(planning);
    match prepared {
        Ok(Some((mut state, selected, index))) => {
            let outcome = match opts.mode {
                LayerMode::Tap => super::cumulative::tap_all(&mut state, &selected, &index, &mut info),
                LayerMode::Bisect => {
                    let _stage = crate::foundation::timings::stage("layers: bisection");
                    super::bisect::run(&mut state, &selected)
                }
            };
            match outcome {
                Ok(per_target) => {
                    for (t, v) in per_target {
                        targets[t] = Some(v);
                    }
                }
                Err(e) => state.problems.push(format!(
                    "per-layer audit stopped: {}",
                    crate::foundation::error::one_line(&e)
                )),
            }
            info.sessions = state.sessions;
            info.problems.append(&mut state.problems);
        }
        Ok(None) => {}
        Err(e) => info.problems.push(crate::foundation::error::one_line(&e)),
    }
    LayerResults { info, targets }
}
