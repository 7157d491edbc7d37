//! Per-layer drift (`compare --layers`, `layers`): where a target departs from the fp32 golden
//! run and from the baseline, and which layer introduced it.
//!
//! Cumulative mode runs the whole model with chosen tensors exposed ("taps") on every target and
//! the matching tensors of the reference on the CPU; isolated mode runs each layer alone on the
//! golden run's inputs, so what a layer introduces is measured without what it inherits. Taps
//! are split into runs whose tensors fit a memory budget and compared run by run, so memory
//! does not grow with the depth of the model. Bisection cuts the graph instead of tapping it.

mod accumulate;
pub mod bisect;
mod cumulative;
pub mod divergence;
pub mod effects;
mod isolated;
mod layout;
pub mod matching;
pub mod measure;
pub mod points;
pub mod run;
pub mod select;
mod split;
pub mod state;
pub mod tap;

use std::collections::BTreeMap;
use std::time::Instant;

use crate::report::common::Num;
use crate::report::compare::{
    CodeComparison, DivergenceRules, LayerAuditInfo, LayerOverflow, LayerReport, OverflowPointer, TargetLayerSummary,
};
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
    /// What departing from the baseline means at each level.
    pub divergence: DivergenceRules,
    /// The target whose layers the others are compared with: `cpu:noopt` unless set (a release
    /// bisection compares a release with the one before it).
    pub baseline: Option<String>,
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

impl crate::foundation::userfile::Reads for LayerOptions {
    fn declare(&self, set: &mut crate::foundation::userfile::InputFiles) {
        let LayerOptions {
            mode: _,
            selection,
            divergence: _,
            baseline: _,
            isolate: _,
            isolate_window: _,
            tap_budget_bytes: _,
            top: _,
        } = self;
        set.add_all(&selection.list);
    }
}

impl LayerOptions {
    /// Every layer tapped and run alone on golden inputs, with the default rules, budget and
    /// listing: the audit that commands other than `compare` run for their attributions
    /// (`runtime bisect`, `matrix --search`).
    pub fn isolated_taps() -> LayerOptions {
        LayerOptions {
            mode: LayerMode::Tap,
            selection: select::Selection::default(),
            divergence: DivergenceRules::default(),
            baseline: None,
            isolate: true,
            isolate_window: 1,
            tap_budget_bytes: 256 << 20,
            top: 10,
        }
    }
}

/// The per-layer results of one audit: the common part and, per planned target, its layers
/// and summary (`None` for targets that did not run).
pub struct LayerResults {
    pub info: LayerAuditInfo,
    pub targets: Vec<Option<(Vec<LayerReport>, TargetLayerSummary)>>,
}

/// The report's view of a code comparison; a float tensor's error is also given relative to the
/// baseline tensor's largest magnitude.
pub fn code_comparison(acc: &LayerAcc) -> Option<CodeComparison> {
    let a = acc.baseline.as_ref().filter(|a| a.elements > 0)?;
    let c = a.codes.unwrap_or_default();
    let relative = if a.max_abs == 0.0 {
        0.0
    } else if acc.baseline_peak > 0.0 {
        a.max_abs / acc.baseline_peak
    } else {
        f64::INFINITY
    };
    Some(CodeComparison {
        differing: a.differing.unwrap_or(a.elements),
        off_by_one: c.off_by_one,
        off_by_two: c.off_by_two,
        off_by_more: c.off_by_more,
        max_steps: if a.codes.is_some() { c.max_steps } else { 0 },
        ties: acc.ties_known.then_some(acc.ties),
        max_abs: Num(a.max_abs),
        max_rel_error: a.codes.is_none().then_some(Num(relative)),
    })
}

/// The SQNR (dB) a layer must cost against its inputs' for golden values past float16's range
/// to count as its own overflow: a clipped square costs tens of dB, while squaring values that
/// are already wrong (a state that departed long before) costs about 6.
const OVERFLOW_DROP_DB: f64 = 10.0;

/// What overflowed in a layer's cumulative figures, when anything did: values that are not
/// numbers where the golden run's are, or golden values past float16's range on a tensor the
/// target computes in float16 (`float16`) that the layer itself did not hold (`drop`: the SQNR
/// it cost against its inputs', when known).
fn overflow(acc: &LayerAcc, float16: bool, drop: Option<f64>) -> Option<LayerOverflow> {
    let o = LayerOverflow {
        nonfinite: acc.nonfinite,
        reference_peak: Num(acc.reference_peak),
        max_abs_error: Num(acc.golden.as_ref().map_or(f64::NAN, |g| g.max_abs())),
        float16,
    };
    let own = drop.is_none_or(|d| d >= OVERFLOW_DROP_DB);
    (o.nonfinite > 0 || (o.beyond_float16() && own)).then_some(o)
}

/// Assembles one target's layer reports from its accumulators; `float16`: the target computes
/// float tensors in float16 (the QNN HTP).
fn reports(
    points: &[Point],
    selected: &[usize],
    matches: &BTreeMap<String, matching::TensorMatch>,
    cumulative: &[LayerAcc],
    isolated: Option<&[LayerAcc]>,
    float16: bool,
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
                overflow: overflow(acc, float16 && point.quant.is_none(), drop.map(|d| d.0)).filter(|_| measured),
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

/// A target's summary from its layers: the first departure from the baseline at each level.
fn summary(
    layers: &[LayerReport],
    baseline: Option<&[LayerReport]>,
    rules: &DivergenceRules,
    layers_not_compared: usize,
) -> TargetLayerSummary {
    let first = divergence::first_departures(layers, baseline, rules);
    let first_overflow = layers.iter().find_map(|l| {
        l.overflow.clone().map(|overflow| OverflowPointer {
            index: l.index,
            node: l.node.clone(),
            op_type: l.op_type.clone(),
            tensor: l.tensor.clone(),
            overflow,
        })
    });
    TargetLayerSummary {
        first_overflow,
        first_divergence: first.beyond_rounding.clone(),
        first_code_difference: first.code_difference,
        first_beyond_rounding: first.beyond_rounding,
        first_sqnr_loss: first.sqnr_loss,
        layers_not_compared,
        tap_effects: None,
        bisect: None,
        error: None,
    }
}

/// Runs the per-layer audit. Never fails: what goes wrong is in `info.problems`.
pub fn audit(ctx: &run::Context<'_>, opts: &LayerOptions) -> LayerResults {
    let start = Instant::now();
    let mut results = run::execute(ctx, opts);
    results.info.seconds = start.elapsed().as_secs_f64();
    results
}
