//! Mixed precision, proven: for a variant that fails the policy on some targets, the layers that
//! introduce the most drift there (the per-layer audit's isolated runs) are changed one at a time
//! (their activations widened to 16 bits, or left in float), and every candidate is audited again
//! on every target. A layer is kept when it raises the failing targets' SQNR; the search stops
//! when the policy holds on all of them or the budget is spent.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;

use super::cells::rank_figure;
use super::{audit_cells, MatrixRun, Variant};
use crate::analyses::layers::LayerOptions;
use crate::data::model::pb::ModelProto;
use crate::data::model::precision::{can_rewrite, leave_in_float, widen_to_16_bits};
use crate::data::target::TargetSpec;
use crate::foundation::userfile::Outputs;
use crate::report::common::Num;
use crate::report::compare::Report;
use crate::report::matrix::Cell;
pub use crate::report::matrix::{RankedLayer, RemedyKind, RemedySearch, RemedyStep, StepPlacement};
use crate::report::RunStatus;

/// A kept layer must raise the lowest SQNR of the failing targets by more than this.
const MIN_GAIN_DB: f64 = 0.05;

impl RemedyKind {
    /// Whether the rewrite can change a variant of this precision: 8-bit activations widen to
    /// 16 bits; 8- or 16-bit ones can be left in float.
    fn applies_to(self, precision: &str) -> bool {
        match self {
            RemedyKind::Widen16 => precision == "int8",
            RemedyKind::Float => matches!(precision, "int8" | "a16w8"),
        }
    }

    /// The name the user gave it (`--search widen16`, `--search float`), as messages say it.
    pub fn flag_value(self) -> &'static str {
        match self {
            RemedyKind::Widen16 => "widen16",
            RemedyKind::Float => "float",
        }
    }

    fn file_tag(self) -> &'static str {
        match self {
            RemedyKind::Widen16 => "a16",
            RemedyKind::Float => "float",
        }
    }
}

/// How a recommendation names a search's change: `at 16 bits`, `in float`.
pub fn kind_phrase(kind: RemedyKind) -> &'static str {
    match kind {
        RemedyKind::Widen16 => "at 16 bits",
        RemedyKind::Float => "in float",
    }
}

/// Every search asked for: each kind on each variant that fails the policy on a target where
/// it ran. The per-layer audit that ranks a variant's layers runs once for all kinds.
pub fn search_all(
    run: &MatrixRun<'_>,
    cells: &[Cell],
    (variants, order): (&[super::VariantInfo], &[String]),
    work: &Path,
    outputs: &mut Outputs,
) -> Result<Vec<RemedySearch>> {
    let (opts, specs) = (run.opts, run.opts.targets.as_slice());
    let mut out = Vec::new();
    if opts.remedies.kinds.is_empty() {
        return Ok(out);
    }
    if let Some(dir) = &opts.remedies.write_candidates {
        outputs.dir("--write-candidates", dir)?;
    }
    for info in order.iter().filter_map(|n| variants.iter().find(|v| v.name == *n)) {
        let Some(variant) = opts.variants.iter().find(|v| v.name == info.name) else {
            continue;
        };
        let failing: Vec<TargetSpec> = specs
            .iter()
            .filter(|s| {
                let cell = cells.iter().find(|c| c.variant == variant.name && c.target == s.id);
                cell.is_some_and(|c| c.status == RunStatus::Ok && !c.meets_policy)
            })
            .cloned()
            .collect();
        let kinds: Vec<RemedyKind> = opts
            .remedies
            .kinds
            .iter()
            .copied()
            .filter(|k| k.applies_to(&info.precision))
            .collect();
        if failing.is_empty() || kinds.is_empty() {
            continue;
        }
        // Read only for the variants searched: the rewrites start from its graph.
        let model = crate::data::model::load_model(&variant.path)?;
        crate::foundation::console::note(format!(
            "matrix: per-layer audit of {} on its {} failing target(s)",
            variant.name,
            failing.len()
        ));
        let (_, layers) = audit_cells(
            run,
            variant,
            (&variant.path, info.size_bytes),
            &failing,
            Some(LayerOptions::isolated_taps()),
        )?;
        let base: Vec<Cell> = cells.iter().filter(|c| c.variant == variant.name).cloned().collect();
        for kind in kinds {
            crate::foundation::console::note(format!(
                "matrix: --search {} on {} (layers {})",
                kind.flag_value(),
                variant.name,
                kind_phrase(kind)
            ));
            let search = Search {
                run,
                variant,
                specs,
                kind,
                work,
                model: &model,
            };
            out.push(search.run(&failing, &layers, base.clone(), outputs)?);
            crate::foundation::interrupt::check()?;
        }
    }
    Ok(out)
}

struct Search<'a> {
    run: &'a MatrixRun<'a>,
    variant: &'a Variant,
    specs: &'a [TargetSpec],
    kind: RemedyKind,
    work: &'a Path,
    model: &'a crate::data::model::LoadedModel,
}

impl Search<'_> {
    fn run(
        &self,
        failing: &[TargetSpec],
        layers: &Report,
        base: Vec<Cell>,
        outputs: &mut Outputs,
    ) -> Result<RemedySearch> {
        let failing_ids: Vec<String> = failing.iter().map(|s| s.id.clone()).collect();
        let mut search = RemedySearch {
            variant: self.variant.name.clone(),
            kind: self.kind,
            failing_targets: failing_ids.clone(),
            ranking: Vec::new(),
            steps: Vec::new(),
            changed: Vec::new(),
            fixed: false,
            outcome: String::new(),
            cells: Vec::new(),
            quantizer_overrides: serde_json::Value::Null,
            error: None,
        };
        search.ranking = self.ranking(layers);
        if search.ranking.is_empty() {
            let problems = layers
                .layer_audit
                .as_ref()
                .map(|l| l.problems.join("; "))
                .unwrap_or_default();
            search.error = Some(if problems.is_empty() {
                "the per-layer audit measured no quantized layer that can be changed".into()
            } else {
                format!("the per-layer audit ranked no layer: {problems}")
            });
            search.outcome = "no candidate".into();
            return Ok(search);
        }
        let mut proto = self.model.proto.clone();
        let mut current = base;
        let budget = self.run.opts.remedies.max_promoted;
        for layer in search.ranking.clone().into_iter().take(budget * 2) {
            if search.changed.len() == budget {
                break;
            }
            let mut candidate = proto.clone();
            let Ok(rewrite) = self.rewrite(&mut candidate, &layer.tensor) else {
                continue;
            };
            let index = search.steps.len() + 1;
            let file = self
                .work
                .join(format!("{}-{}-{index}.onnx", self.variant.name, self.kind.file_tag()));
            crate::data::model::rewrite::write_model(&candidate, self.model, &file)?;
            // The candidate's file, and the external data it shares with the variant.
            let bytes = std::fs::metadata(&file)?.len() + self.model.total_bytes() - self.model.size;
            let (cells, _) = audit_cells(self.run, self.variant, (&file, bytes), self.specs, None)?;
            let mut step = self.step(layer, rewrite, &current, &cells, &failing_ids);
            step.candidate_file = self.keep_candidate(&file, outputs)?;
            let kept = step.kept;
            search.steps.push(step);
            if kept {
                proto = candidate;
                search.changed.push(layer_tensor(&search));
                current = cells;
                if failing_ids.iter().all(|t| meets(&current, t)) {
                    search.fixed = true;
                    break;
                }
            }
            crate::foundation::interrupt::check()?;
        }
        self.conclude(&mut search, current);
        Ok(search)
    }

    /// Stages the candidate under `--write-candidates`, unless the model keeps its weights in
    /// external data (the candidate's file alone would not load elsewhere).
    fn keep_candidate(&self, file: &Path, outputs: &mut Outputs) -> Result<Option<String>> {
        let Some(dir) = &self.run.opts.remedies.write_candidates else {
            return Ok(None);
        };
        if !self.model.external_data_files().is_empty() {
            return Ok(None);
        }
        let dest = dir.join(file.file_name().unwrap_or_default());
        outputs.file("--write-candidates", &dest, &std::fs::read(file)?)?;
        Ok(Some(dest.display().to_string()))
    }

    fn rewrite(
        &self,
        proto: &mut ModelProto,
        tensor: &str,
    ) -> Result<String, crate::data::model::precision::PrecisionError> {
        match self.kind {
            RemedyKind::Widen16 => widen_to_16_bits(proto, tensor).map(|w| {
                format!(
                    "{}: scale {:e} zero point {} (8-bit) -> scale {:e} zero point {} ({})",
                    w.tensor, w.scale_8, w.zero_point_8, w.scale_16, w.zero_point_16, w.code_type
                )
            }),
            RemedyKind::Float => leave_in_float(proto, tensor).map(|f| {
                format!(
                    "{}: removed {}; read in float by {}",
                    f.tensor,
                    f.removed.join(", "),
                    f.consumers.join(", ")
                )
            }),
        }
    }

    /// Quantized layers that the rewrite accepts, most drift introduced first.
    /// The layers of the failing targets' rows (not the baseline's) in `report`.
    fn ranking(&self, report: &Report) -> Vec<RankedLayer> {
        let mut worst: BTreeMap<String, RankedLayer> = BTreeMap::new();
        let rows = report
            .targets
            .iter()
            .filter(|t| t.role == crate::report::facts::TargetRole::Target);
        for layer in rows.flat_map(|t| &t.layers).filter(|l| l.quantized) {
            let Some(s) = layer.introduced_sqnr_db else {
                continue;
            };
            let entry = worst.entry(layer.float_tensor.clone()).or_insert_with(|| RankedLayer {
                tensor: layer.float_tensor.clone(),
                node: layer.node.clone(),
                op_type: layer.op_type.clone(),
                introduced_sqnr_db: s,
            });
            if s.0 < entry.introduced_sqnr_db.0 {
                entry.introduced_sqnr_db = s;
            }
        }
        let mut ranked: Vec<RankedLayer> = worst
            .into_values()
            .filter(|l| can_rewrite(&self.model.proto, &l.tensor, self.kind == RemedyKind::Widen16).is_ok())
            .collect();
        ranked.sort_by(|a, b| a.introduced_sqnr_db.0.total_cmp(&b.introduced_sqnr_db.0));
        ranked
    }

    fn step(
        &self,
        layer: RankedLayer,
        rewrite: String,
        before: &[Cell],
        after: &[Cell],
        failing: &[String],
    ) -> RemedyStep {
        let mut step = RemedyStep {
            layer,
            rewrite,
            kept: false,
            sqnr_db: BTreeMap::new(),
            gained_db: BTreeMap::new(),
            meets_policy: BTreeMap::new(),
            placement: BTreeMap::new(),
            regressions: Vec::new(),
            did_not_run: Vec::new(),
            candidate_file: None,
        };
        for c in after {
            let prev = before.iter().find(|b| b.target == c.target);
            if let Some(s) = c.sqnr_db {
                step.sqnr_db.insert(c.target.clone(), s);
                if let Some(p) = prev.and_then(|p| p.sqnr_db) {
                    step.gained_db.insert(c.target.clone(), Num(s.0 - p.0));
                }
            }
            step.meets_policy.insert(c.target.clone(), c.meets_policy);
            let on_cpu = c.target.starts_with("cpu") || c.fallback_nodes.contains(&step.layer.node);
            let runs_on = match (c.status.as_str(), on_cpu) {
                ("ok", true) => "cpu",
                ("ok", false) => "npu",
                _ => "-",
            };
            step.placement.insert(
                c.target.clone(),
                StepPlacement {
                    layer_runs_on: runs_on.into(),
                    compute_fallback_nodes: c.compute_fallback_nodes,
                    partitions: c.partitions,
                    crossing_bytes: c.crossing_bytes,
                },
            );
        }
        step.regressions = after
            .iter()
            .filter(|c| !c.meets_policy && meets(before, &c.target))
            .map(|c| c.target.clone())
            .collect();
        step.did_not_run = after
            .iter()
            .filter(|c| {
                c.status != RunStatus::Ok && before.iter().any(|b| b.target == c.target && b.status == RunStatus::Ok)
            })
            .map(|c| c.target.clone())
            .collect();
        step.kept = improves(before, after, failing);
        step
    }

    fn conclude(&self, search: &mut RemedySearch, current: Vec<Cell>) {
        let n = search.changed.len();
        search.outcome = match (search.fixed, n) {
            (true, _) => format!(
                "the policy holds on every failing target with {n} layer(s) changed: {}",
                search.changed.join(", ")
            ),
            (false, 0) => {
                let broke: std::collections::BTreeSet<&String> = search
                    .steps
                    .iter()
                    .flat_map(|st| &st.did_not_run)
                    .filter(|t| search.failing_targets.contains(t))
                    .collect();
                if broke.is_empty() {
                    "no layer raised the failing targets' SQNR".into()
                } else {
                    let names: Vec<&str> = broke.into_iter().map(String::as_str).collect();
                    format!("no layer kept: candidates stopped running on {}", names.join(", "))
                }
            }
            (false, _) => {
                let budget = self.run.opts.remedies.max_promoted;
                let spent = if n == budget {
                    format!("budget spent ({n} layer(s) kept, --max-promoted {budget})")
                } else {
                    format!("{} layer(s) tried, {n} kept", search.steps.len())
                };
                let still: Vec<&str> = search
                    .failing_targets
                    .iter()
                    .filter(|t| !meets(&current, t))
                    .map(String::as_str)
                    .collect();
                format!("{spent}: the policy still fails on {}", still.join(", "))
            }
        };
        search.quantizer_overrides = overrides(self.kind, search);
        if n > 0 {
            search.cells = current;
        }
    }
}

fn layer_tensor(search: &RemedySearch) -> String {
    search.steps.last().map(|s| s.layer.tensor.clone()).unwrap_or_default()
}

/// Whether a candidate (`after`) is better than the last kept one (`before`) on the failing
/// targets: more of them meet the policy, or as many and the lowest SQNR of those that still do
/// not rises by more than [`MIN_GAIN_DB`] (a target where the candidate does not run counts as
/// −∞ dB). The dispatch is per target: a candidate that fixes some failing targets and stops
/// running on others, which failed anyway, is progress.
fn improves(before: &[Cell], after: &[Cell], failing: &[String]) -> bool {
    let score = |cells: &[Cell]| {
        let passing = failing.iter().filter(|t| meets(cells, t)).count();
        let lowest = failing
            .iter()
            .filter(|t| !meets(cells, t))
            .filter_map(|t| cells.iter().find(|c| c.target == *t))
            .map(rank_figure)
            .fold(f64::INFINITY, f64::min);
        (passing, lowest)
    };
    let ((passing_before, lowest_before), (passing_after, lowest_after)) = (score(before), score(after));
    passing_after > passing_before || (passing_after == passing_before && lowest_after > lowest_before + MIN_GAIN_DB)
}

fn meets(cells: &[Cell], target: &str) -> bool {
    cells.iter().any(|c| c.target == target && c.meets_policy)
}

/// What to give ONNX Runtime's quantizer to make the final candidate properly.
fn overrides(kind: RemedyKind, search: &RemedySearch) -> serde_json::Value {
    let kept = search.steps.iter().filter(|s| s.kept);
    match kind {
        RemedyKind::Widen16 => {
            let signed = |s: &RemedyStep| s.rewrite.contains("(int16)");
            let map: serde_json::Map<String, serde_json::Value> = kept
                .map(|s| {
                    let t = if signed(s) { "QInt16" } else { "QUInt16" };
                    (s.layer.tensor.clone(), serde_json::json!([{ "quant_type": t }]))
                })
                .collect();
            serde_json::json!({ "extra_options": { "TensorQuantOverrides": map } })
        }
        RemedyKind::Float => {
            let nodes: Vec<String> = kept.map(|s| s.layer.node.clone()).collect();
            serde_json::json!({ "nodes_to_exclude": nodes })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(target: &str, status: &str, sqnr: f64, meets_policy: bool) -> Cell {
        Cell {
            variant: "v".into(),
            target: target.into(),
            status: serde_json::from_value(serde_json::Value::String(status.into())).unwrap(),
            error: None,
            meets_policy,
            failed_rules: vec![],
            worst_output: None,
            sqnr_db: Some(Num(sqnr)),
            max_abs: None,
            top1_agreement: None,
            compute_fallback_nodes: None,
            partitions: None,
            crossing_bytes: None,
            fallback_nodes: vec![],
            model_bytes: 0,
            runtime: None,
            options: BTreeMap::new(),
            task: None,
        }
    }

    #[test]
    fn a_candidate_is_kept_for_more_passing_targets_or_a_higher_floor() {
        let failing = ["a".to_string(), "b".to_string()];
        let before = [cell("a", "ok", 15.0, false), cell("b", "ok", 14.0, false)];
        // One more target passes, even though the other one drops.
        assert!(improves(
            &before,
            &[cell("a", "ok", 26.0, true), cell("b", "ok", 10.0, false)],
            &failing
        ));
        // Neither passes: the lowest must rise by more than 0.05 dB.
        assert!(improves(
            &before,
            &[cell("a", "ok", 16.0, false), cell("b", "ok", 14.1, false)],
            &failing
        ));
        assert!(!improves(
            &before,
            &[cell("a", "ok", 19.0, false), cell("b", "ok", 14.04, false)],
            &failing
        ));
        // A failing target that stops running is −∞ dB: progress only if another one passes.
        let stops = [cell("a", "ok", 19.0, false), cell("b", "failed", 0.0, false)];
        assert!(!improves(&before, &stops, &failing));
        let fixes_one = [cell("a", "ok", 26.0, true), cell("b", "failed", 0.0, false)];
        assert!(improves(&before, &fixes_one, &failing));
    }
}
