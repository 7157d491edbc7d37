//! The comparison core: every output of every target against the golden run, and every pair of
//! targets against each other. Tensors are read one (sample, output) at a time, so memory holds
//! one output of each target, never a whole run.

pub mod agreement;
pub mod class_axis;
pub mod decision;
pub mod errors;
pub mod logits;
pub mod topk;

use std::collections::HashMap;

use anyhow::{Context, Result};

pub use agreement::Agreement;
pub use class_axis::{ClassAxisFlag, ClassAxisPolicy};
pub use decision::Decision;
pub use errors::ErrorStats;
pub use topk::TopKStats;

/// `10·log10(signal / noise)` of summed squares: +inf when there is no noise (an exact match),
/// -inf when there is noise and no signal. The one SQNR formula of the tool: every SQNR it
/// reports (outputs, layers, logits, repro windows) comes through here.
pub fn sqnr_from_sums(signal: f64, noise: f64) -> f64 {
    if noise == 0.0 {
        f64::INFINITY
    } else if signal == 0.0 {
        f64::NEG_INFINITY
    } else {
        10.0 * (signal / noise).log10()
    }
}

use crate::data::tensor::Tensor;
use crate::execution::exec::OutputFile;
use crate::report::common::Num;
use crate::report::compare::{AgreementEntry, BitExactGroups, OutputMetrics};

/// One side of a comparison: a target's output files, per sample.
pub struct RunOutputs<'a> {
    pub id: &'a str,
    pub samples: &'a [Vec<OutputFile>],
}

/// What the comparison produces.
pub struct Comparison {
    /// Per target id, per audited output.
    pub metrics: HashMap<String, Vec<OutputMetrics>>,
    pub agreement: Vec<AgreementEntry>,
    pub groups: Vec<BitExactGroups>,
    /// Notes for the report: outputs whose max ULP distance comes from values near zero.
    pub notes: Vec<String>,
}

struct Cell {
    stats: ErrorStats,
    topk: Option<TopKStats>,
    dtype: String,
    shape: Vec<usize>,
    axis: Option<usize>,
    error: Option<String>,
    shape_mismatch: bool,
}

/// Running figures of every (target, output) and every (pair of targets, output).
struct Accumulation {
    /// Per target, per output.
    cells: Vec<Vec<Option<Cell>>>,
    pairs: Vec<(usize, usize)>,
    /// Per pair, per output; `broken` when the pair could not be compared on some sample.
    pair_stats: Vec<Vec<Agreement>>,
    pair_broken: Vec<Vec<bool>>,
}

impl Accumulation {
    fn new(targets: usize, lsbs: &[Option<f64>], outputs: usize) -> Accumulation {
        let pairs: Vec<(usize, usize)> = (0..targets)
            .flat_map(|a| (a + 1..targets).map(move |b| (a, b)))
            .collect();
        Accumulation {
            cells: (0..targets).map(|_| (0..outputs).map(|_| None).collect()).collect(),
            pair_stats: pairs
                .iter()
                .map(|_| {
                    (0..outputs)
                        .map(|k| Agreement::with_lsb(lsbs.get(k).copied().flatten()))
                        .collect()
                })
                .collect(),
            pair_broken: pairs.iter().map(|_| vec![false; outputs]).collect(),
            pairs,
        }
    }

    /// Adds output `k` (`name`) of sample `s` of every target: against the golden tensor, and
    /// pair by pair.
    fn add(
        &mut self,
        s: usize,
        k: usize,
        name: &str,
        gold: &Tensor,
        axis: Option<usize>,
        targets: &[RunOutputs<'_>],
    ) -> Result<()> {
        let mut loaded: Vec<Option<Tensor>> = Vec::with_capacity(targets.len());
        for (t, target) in targets.iter().enumerate() {
            let cell = self.cells[t][k].get_or_insert_with(|| Cell::new(axis));
            let Some(file) = target.samples.get(s).and_then(|files| find(files, name)) else {
                cell.error
                    .get_or_insert_with(|| format!("the target returned no output '{name}'"));
                loaded.push(None);
                continue;
            };
            let out = Tensor::read_npy(&file.path)?;
            cell.add(s, &out, gold, axis);
            loaded.push(Some(out));
        }
        for (p, &(a, b)) in self.pairs.iter().enumerate() {
            match (&loaded[a], &loaded[b]) {
                (Some(x), Some(y)) if x.shape == y.shape => self.pair_stats[p][k].update(&x.data, &y.data),
                _ => self.pair_broken[p][k] = true,
            }
        }
        Ok(())
    }

    fn finish(self, outputs: &[String], targets: &[RunOutputs<'_>]) -> Comparison {
        let notes = near_zero_ulp_notes(&self.cells, outputs, targets);
        let metrics = self
            .cells
            .into_iter()
            .zip(targets)
            .map(|(row, t)| {
                let row: Vec<OutputMetrics> = row
                    .into_iter()
                    .zip(outputs)
                    .map(|(cell, name)| summarize(name, cell))
                    .collect();
                (t.id.to_string(), row)
            })
            .collect();
        let mut agreement = Vec::new();
        for (p, &(a, b)) in self.pairs.iter().enumerate() {
            for (k, name) in outputs.iter().enumerate() {
                let st = &self.pair_stats[p][k];
                let (elements, differing, max_abs, codes) = if self.pair_broken[p][k] {
                    (0, None, f64::NAN, None)
                } else {
                    (st.elements, st.differing, st.max_abs, st.codes)
                };
                agreement.push(AgreementEntry {
                    a: targets[a].id.to_string(),
                    b: targets[b].id.to_string(),
                    output: name.clone(),
                    elements,
                    differing_elements: differing,
                    max_abs: Num(max_abs),
                    code_differences: codes,
                });
            }
        }
        let ids: Vec<&str> = targets.iter().map(|t| t.id).collect();
        let groups = outputs
            .iter()
            .map(|name| BitExactGroups {
                output: name.clone(),
                groups: bit_exact_groups(name, &ids, &agreement),
            })
            .collect();
        Comparison {
            metrics,
            agreement,
            groups,
            notes,
        }
    }
}

/// One note per output whose max ULP distance comes from values near zero on some target (see
/// `stats`): a ULP distance counts every float between two values, so a quantized 0 against a
/// small golden probability is some 10^9 ULP apart; the note gives the max away from zero.
fn near_zero_ulp_notes(cells: &[Vec<Option<Cell>>], outputs: &[String], targets: &[RunOutputs<'_>]) -> Vec<String> {
    let mut notes = Vec::new();
    for (k, name) in outputs.iter().enumerate() {
        let figures: Vec<String> = cells
            .iter()
            .zip(targets)
            .filter_map(|(row, t)| {
                let cell = row.get(k)?.as_ref().filter(|c| c.error.is_none())?;
                let n = cell.stats.near_zero_ulp()?;
                let away = n
                    .away_from_zero
                    .map_or("none (every element is near zero)".into(), |a| a.to_string());
                Some(format!("{} {away} (not {})", t.id, n.max_ulp))
            })
            .collect();
        if !figures.is_empty() {
            notes.push(format!(
                "{name}: the max ULP comes from values near zero (below {:e} of the sample's largest golden magnitude), \
                 where a ULP distance counts every float between the two values; away from zero it is {}",
                errors::NEAR_ZERO,
                figures.join(", ")
            ));
        }
    }
    notes
}

impl Cell {
    fn new(axis: Option<usize>) -> Cell {
        Cell {
            stats: ErrorStats::new(false, false),
            topk: None,
            dtype: String::new(),
            shape: Vec::new(),
            axis,
            error: None,
            shape_mismatch: false,
        }
    }

    /// Adds one sample's output against the golden one (the first sample fixes the type).
    fn add(&mut self, s: usize, out: &Tensor, gold: &Tensor, axis: Option<usize>) {
        if s == 0 {
            let same = out.dtype() == gold.dtype();
            self.stats = ErrorStats::new(same, same && out.dtype().is_float());
            self.dtype = out.dtype().name().to_string();
            self.shape = out.shape.clone();
            self.topk = axis.map(|a| TopKStats::new(gold.shape[a]));
        }
        if out.shape != gold.shape {
            self.shape_mismatch = true;
            self.error
                .get_or_insert_with(|| format!("shape {:?} differs from the golden run's {:?}", out.shape, gold.shape));
        } else if self.error.is_none() {
            self.stats.update(&out.data, &gold.data);
            if let (Some(tk), Some(a)) = (self.topk.as_mut(), axis) {
                tk.update(&out.data, &gold.data, &gold.shape, a);
            }
        }
    }
}

/// Compares `targets` against `golden`. `outputs[k]` is the name of the audited model's k-th output
/// and `golden_names[k]` the name of its counterpart in the golden run; `lsbs[k]` its quantization
/// step, when it has one (target pairs then count differences in steps).
pub fn compare(
    outputs: &[String],
    lsbs: &[Option<f64>],
    golden_names: &[String],
    golden: &RunOutputs<'_>,
    targets: &[RunOutputs<'_>],
    classes: &ClassAxisPolicy,
) -> Result<Comparison> {
    let mut acc = Accumulation::new(targets.len(), lsbs, outputs.len());
    for s in 0..golden.samples.len() {
        for (k, name) in outputs.iter().enumerate() {
            let gold_file = find(&golden.samples[s], &golden_names[k])
                .with_context(|| format!("the golden run has no output '{}' for sample {s}", golden_names[k]))?;
            let gold = Tensor::read_npy(&gold_file.path)?;
            let axis = classes.resolve(name, &gold.shape, gold.dtype());
            acc.add(s, k, name, &gold, axis, targets)?;
        }
    }
    Ok(acc.finish(outputs, targets))
}

fn find<'f>(files: &'f [OutputFile], name: &str) -> Option<&'f OutputFile> {
    files.iter().find(|f| f.name == name)
}

fn summarize(name: &str, cell: Option<Cell>) -> OutputMetrics {
    let Some(cell) = cell else {
        return OutputMetrics {
            name: name.to_string(),
            dtype: String::new(),
            shape: vec![],
            elements: 0,
            bit_identical: None,
            max_abs: Num(f64::NAN),
            mean_abs: Num(f64::NAN),
            rmse: Num(f64::NAN),
            max_ulp: None,
            cosine: Num(f64::NAN),
            sqnr_db: Num(f64::NAN),
            top1_agreement: None,
            top5_agreement: None,
            nan_count: 0,
            inf_count: 0,
            nonfinite_mismatch: 0,
            class_axis: None,
            baseline: None,
            error: Some("no samples".into()),
            shape_mismatch: false,
        };
    };
    let s = &cell.stats;
    let broken = cell.error.is_some();
    let num = |v: f64| Num(if broken { f64::NAN } else { v });
    OutputMetrics {
        name: name.to_string(),
        dtype: cell.dtype,
        shape: cell.shape,
        elements: s.elements,
        bit_identical: s.bit_identical.filter(|_| !broken),
        max_abs: num(s.max_abs()),
        mean_abs: num(s.mean_abs()),
        rmse: num(s.rmse()),
        max_ulp: s.max_ulp_distance().filter(|_| !broken),
        cosine: num(s.cosine()),
        sqnr_db: num(s.sqnr_db()),
        top1_agreement: cell.topk.as_ref().and_then(|t| t.top1()).filter(|_| !broken),
        top5_agreement: cell.topk.as_ref().and_then(|t| t.top5()).filter(|_| !broken),
        nan_count: s.nan_count,
        inf_count: s.inf_count,
        nonfinite_mismatch: s.nonfinite_mismatch,
        class_axis: cell.axis,
        baseline: None,
        error: cell.error,
        shape_mismatch: cell.shape_mismatch,
    }
}

/// Groups targets whose output is bit-identical (transitively, via pairs with 0 differing
/// elements). Every target in `ids` appears in exactly one group.
pub fn bit_exact_groups(output: &str, ids: &[&str], agreement: &[AgreementEntry]) -> Vec<Vec<String>> {
    let mut parent: Vec<usize> = (0..ids.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for e in agreement
        .iter()
        .filter(|e| e.output == output && e.differing_elements == Some(0))
    {
        let (Some(a), Some(b)) = (ids.iter().position(|&i| i == e.a), ids.iter().position(|&i| i == e.b)) else {
            continue;
        };
        let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
        parent[ra.max(rb)] = ra.min(rb);
    }
    let mut groups: Vec<Vec<String>> = Vec::new();
    let mut group_of_root: Vec<Option<usize>> = vec![None; ids.len()];
    for (i, id) in ids.iter().enumerate() {
        let r = root(&mut parent, i);
        match group_of_root[r] {
            Some(g) => groups[g].push(id.to_string()),
            None => {
                group_of_root[r] = Some(groups.len());
                groups.push(vec![id.to_string()]);
            }
        }
    }
    groups
}
