//! What every target that ran has accumulated over the runs of the per-layer audit, per
//! selected layer: its cumulative and isolated measurements, its tap effects, and its session
//! failures (shared by the cumulative and the isolated runs).

use std::collections::BTreeMap;

use super::effects::EffectsAcc;
use super::layout::Planned;
use super::measure::LayerAcc;
use super::split::Retried;
use super::state::State;

/// What every target that ran has accumulated so far, per selected layer.
pub(super) struct Accumulators {
    pub(super) cumulative: BTreeMap<usize, Vec<LayerAcc>>,
    pub(super) isolated: BTreeMap<usize, Vec<LayerAcc>>,
    pub(super) effects: BTreeMap<usize, EffectsAcc>,
    /// The first session failure of each target, as its summary says it.
    pub(super) failures: BTreeMap<usize, String>,
}

impl Accumulators {
    pub(super) fn new(state: &State<'_>, selected: &[usize], units: &[Planned], isolate: bool) -> Accumulators {
        let new_accs = |target: usize| -> Vec<LayerAcc> {
            selected
                .iter()
                .map(|&p| {
                    let point = &state.points[p];
                    LayerAcc::new(
                        state.reference_name(&point.float_name).is_some(),
                        state.ctx.baseline.is_some() && !state.is_baseline(target),
                        point.quant.is_some(),
                    )
                })
                .collect()
        };
        let mut isolated: BTreeMap<usize, Vec<LayerAcc>> = state.ran.iter().map(|&t| (t, new_accs(t))).collect();
        for (k, u) in units.iter().enumerate() {
            if let (Some(e), true) = (&u.unit_error, isolate) {
                for accs in isolated.values_mut() {
                    accs[k].error = Some(format!("not run alone: {e}"));
                }
            }
        }
        Accumulators {
            cumulative: state.ran.iter().map(|&t| (t, new_accs(t))).collect(),
            isolated,
            effects: state
                .ran
                .iter()
                .filter_map(|&t| Some((t, EffectsAcc::new(state.ctx.untapped[t]?))))
                .collect(),
            failures: BTreeMap::new(),
        }
    }

    /// Records a session of `target` that failed with `error` and was retried in halves over
    /// `items` layers: the layers that still fail are marked, and the target's failure summed up.
    pub(super) fn retried(&mut self, cumulative: bool, target: usize, retried: &Retried, error: &str, items: usize) {
        let (what, why) = if cumulative {
            ("a tapped session", "the tapped session fails with this tensor exposed")
        } else {
            ("an isolated session", "the layer alone fails on this target")
        };
        let failed: Vec<(usize, String)> = retried
            .failed
            .iter()
            .map(|(k, err)| (*k, format!("{why}: {err}")))
            .collect();
        self.fail(cumulative, target, &failed, split_failure(what, error, retried, items));
    }

    /// Marks layers `items` of `target` as not measured by this kind of session (`cumulative`
    /// or isolated), and records the target's first failure.
    pub(super) fn fail(&mut self, cumulative: bool, target: usize, items: &[(usize, String)], summary: String) {
        let accs = if cumulative {
            &mut self.cumulative
        } else {
            &mut self.isolated
        };
        if let Some(accs) = accs.get_mut(&target) {
            for (k, err) in items {
                accs[*k].error = Some(err.clone());
            }
        }
        self.failures.entry(target).or_insert(summary);
    }
}

/// The summary line of a session that failed and was retried in halves.
pub(super) fn split_failure(what: &str, error: &str, retried: &Retried, items: usize) -> String {
    if retried.localised && !retried.failed.is_empty() {
        format!(
            "{what} failed ({error}); retried in halves: {} of {items} layer(s) make it fail, the others were measured",
            retried.failed.len()
        )
    } else if retried.failed.is_empty() {
        format!("{what} failed ({error}); retried in halves, every layer was then measured")
    } else {
        format!(
            "{what} failed ({error}); retried in halves without isolating a cause: {} of {items} layer(s) not measured",
            retried.failed.len()
        )
    }
}
