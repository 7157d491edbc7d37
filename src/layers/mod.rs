//! Per-layer drift (`compare --layers`, `layers`): where a target departs from the fp32 golden
//! run and from the baseline, and which layer introduced it.
//!
//! Cumulative mode runs the whole model with chosen tensors exposed ("taps") on every target and
//! the matching tensors of the reference on the CPU; isolated mode runs each layer alone on the
//! golden run's inputs, so what a layer introduces is measured without what it inherits. Taps
//! are split into runs whose tensors fit a memory budget and compared run by run, so memory
//! does not grow with the depth of the model. Bisection cuts the graph instead of tapping it.

pub mod bisect;
mod cumulative;
pub mod effects;
mod isolated;
pub mod matching;
pub mod measure;
mod plan;
pub mod points;
pub mod run;
pub mod select;
mod split;
pub mod tap;

use std::collections::BTreeMap;
use std::time::Instant;

use crate::report::model::{CodeComparison, LayerAuditInfo, LayerPointer, LayerReport, Num, TargetLayerSummary};
use measure::LayerAcc;
use points::Point;

/// How the per-layer audit looks for drift.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerMode {
    /// Tap every selected point (all of them without filters).
    Tap,
    /// Cut the graph at tensors every path goes through and bisect.
    Bisect,
}

/// Everything the per-layer audit was asked to do.
#[derive(Debug, Clone)]
pub struct LayerOptions {
    pub mode: LayerMode,
    pub selection: select::Selection,
    /// A layer departs from the baseline when a code differs by more than this many LSB.
    pub tolerance_lsb: u64,
    /// Also run every layer alone on golden inputs.
    pub isolate: bool,
    /// Layers run together in isolation: the layer and up to this many minus one upstream
    /// (a window keeps fusions across layers that the target would otherwise lose).
    pub isolate_window: usize,
    /// Bytes of tapped tensors per sample that one run may return.
    pub tap_budget_bytes: u64,
    /// Layers the terminal lists per target.
    pub top: usize,
}

/// The per-layer results of one audit: the common part and, per planned target, its layers
/// and summary (`None` for targets that did not run).
pub struct LayerResults {
    pub info: LayerAuditInfo,
    pub targets: Vec<Option<(Vec<LayerReport>, TargetLayerSummary)>>,
}

/// The report's view of a code comparison.
pub fn code_comparison(acc: &LayerAcc) -> Option<CodeComparison> {
    let a = acc.baseline.as_ref().filter(|a| a.elements > 0)?;
    let c = a.codes.unwrap_or_default();
    Some(CodeComparison {
        differing: a.differing.unwrap_or(a.elements),
        off_by_one: c.off_by_one,
        off_by_two: c.off_by_two,
        off_by_more: c.off_by_more,
        max_steps: if a.codes.is_some() { c.max_steps } else { 0 },
        ties: acc.ties_known.then_some(acc.ties),
        max_abs: Num(a.max_abs),
    })
}

/// Whether a comparison departs beyond the tolerance: codes by more than `tolerance` LSB. A float
/// tensor has no grid to count LSB on, so it departs when any bit differs and the tolerance is
/// 0, and never at a tolerance above 0 (its figures are still reported).
fn departs(c: &CodeComparison, quantized: bool, tolerance: u64) -> bool {
    if quantized {
        c.differing > 0 && c.max_steps > tolerance
    } else {
        c.differing > 0 && tolerance == 0
    }
}

/// Assembles one target's layer reports from its accumulators.
fn reports(
    points: &[Point],
    selected: &[usize],
    matches: &BTreeMap<String, matching::TensorMatch>,
    cumulative: &[LayerAcc],
    isolated: Option<&[LayerAcc]>,
) -> Vec<LayerReport> {
    let sqnr: BTreeMap<usize, f64> = selected
        .iter()
        .zip(cumulative)
        .filter(|(_, acc)| acc.error.is_none() && acc.elements > 0)
        .filter_map(|(&p, acc)| Some((p, acc.golden.as_ref()?.sqnr_db())))
        .collect();
    selected
        .iter()
        .enumerate()
        .map(|(k, &p)| {
            let point = &points[p];
            let acc = &cumulative[k];
            let iso = isolated.map(|i| &i[k]);
            let measured = acc.error.is_none() && acc.elements > 0;
            let own = acc.golden.as_ref().filter(|_| measured).map(|g| g.sqnr_db());
            let inherited = point
                .inputs
                .iter()
                .filter_map(|i| sqnr.get(i).copied())
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))));
            let drop = match (inherited, own) {
                (Some(i), Some(o)) if i.is_finite() && o.is_finite() => Some(Num(i - o)),
                _ => None,
            };
            let iso_ok = iso.filter(|i| i.error.is_none() && i.elements > 0);
            LayerReport {
                index: p,
                op_type: point.op_type.clone(),
                node: point.node.clone(),
                tensor: point.tensor.clone(),
                float_tensor: point.float_name.clone(),
                reference_tensor: matches.get(&point.float_name).map(|m| m.reference.clone()),
                quantized: point.quant.is_some(),
                elements: acc.elements,
                sqnr_db: own.map(Num),
                max_abs: acc.golden.as_ref().filter(|_| measured).map(|g| Num(g.max_abs())),
                sqnr_drop_db: drop,
                vs_baseline: code_comparison(acc).filter(|_| acc.error.is_none()),
                introduced_sqnr_db: iso_ok.and_then(|i| i.golden.as_ref()).map(|g| Num(g.sqnr_db())),
                introduced_max_abs: iso_ok.and_then(|i| i.golden.as_ref()).map(|g| Num(g.max_abs())),
                introduced_vs_baseline: iso_ok.and_then(code_comparison),
                error: match (acc.problems(), iso.and_then(LayerAcc::problems)) {
                    (Some(c), Some(i)) => Some(format!("{c}; isolated: {i}")),
                    (Some(c), None) => Some(c),
                    (None, Some(i)) => Some(format!("isolated: {i}")),
                    (None, None) => None,
                },
            }
        })
        .collect()
}

/// Layers that should have been compared with the baseline but were not.
fn not_compared(layers: &[LayerReport], is_baseline: bool) -> usize {
    if is_baseline {
        return 0;
    }
    layers.iter().filter(|l| l.vs_baseline.is_none()).count()
}

/// The first layer departing from the baseline.
fn first_divergence(layers: &[LayerReport], tolerance: u64) -> Option<LayerPointer> {
    layers.iter().find_map(|l| {
        let c = l.vs_baseline.as_ref()?;
        departs(c, l.quantized, tolerance).then(|| LayerPointer {
            index: l.index,
            node: l.node.clone(),
            op_type: l.op_type.clone(),
            tensor: l.tensor.clone(),
            differing: c.differing,
            max_steps: c.max_steps,
            introduced: l
                .introduced_vs_baseline
                .as_ref()
                .map(|i| departs(i, l.quantized, tolerance)),
        })
    })
}

/// Runs the per-layer audit. Never fails: what goes wrong is in `info.problems`.
pub fn audit(ctx: &run::Context<'_>, opts: &LayerOptions) -> LayerResults {
    let start = Instant::now();
    let mut results = run::execute(ctx, opts);
    results.info.seconds = start.elapsed().as_secs_f64();
    results
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn departure_is_beyond_the_tolerance_in_lsb() {
        let c = CodeComparison {
            differing: 3,
            off_by_one: 3,
            off_by_two: 0,
            off_by_more: 0,
            max_steps: 1,
            ties: None,
            max_abs: Num(0.1),
        };
        assert!(departs(&c, true, 0));
        assert!(!departs(&c, true, 1));
        assert!(departs(&c, false, 0));
        assert!(!departs(&c, false, 1));
    }
}
