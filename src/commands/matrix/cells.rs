//! One matrix cell (a variant on a target) read from the `compare` report that ran it: status,
//! the worst output's figures, placement, and whether the policy holds there.

use crate::report::common::Num;
use crate::report::compare::{Report, TargetReport};
pub use crate::report::matrix::Cell;

/// The cell of `variant` on `target` from the report row `row` of `report`.
pub fn cell(report: &Report, row: &TargetReport, variant: &str, target: &str, model_bytes: u64) -> Cell {
    let rules: Vec<_> = report.gate.rules.iter().filter(|r| r.target == row.id).collect();
    let ran = row.status == crate::report::RunStatus::Ok;
    let failed_rules = rules
        .iter()
        .filter(|r| !r.pass)
        .map(|r| format!("{} {}: {} vs {}", r.rule, r.output, r.measured.0, r.limit.0))
        .collect::<Vec<_>>();
    let worst = row.outputs.iter().min_by(|a, b| {
        a.sqnr_db
            .0
            .partial_cmp(&b.sqnr_db.0)
            .unwrap_or(std::cmp::Ordering::Less)
    });
    let max_abs = row.outputs.iter().map(|o| o.max_abs.0).reduce(f64::max).map(Num);
    let top1 = row.outputs.iter().filter_map(|o| o.top1_agreement).reduce(f64::min);
    let placement = row.placement.as_ref();
    Cell {
        variant: variant.to_string(),
        target: target.to_string(),
        status: row.status,
        error: row.error.clone(),
        meets_policy: ran && failed_rules.is_empty() && !row.outputs.iter().any(|o| o.error.is_some()),
        failed_rules,
        worst_output: worst.map(|o| o.name.clone()),
        sqnr_db: worst.map(|o| o.sqnr_db),
        max_abs,
        top1_agreement: top1,
        compute_fallback_nodes: placement.map(|p| p.compute_fallback_nodes),
        partitions: placement.map(|p| p.ep_partitions),
        crossing_bytes: placement.and_then(|p| p.crossing_bytes),
        fallback_nodes: placement
            .map(|p| {
                p.fallback
                    .iter()
                    .filter(|f| f.kind == "compute")
                    .map(|f| f.name.clone())
                    .collect()
            })
            .unwrap_or_default(),
        model_bytes,
        runtime: row.runtime.as_ref().map(runtime_text),
        options: row.options.clone(),
        task: None,
    }
}

/// How a cell names the runtime that ran it.
pub fn runtime_text(r: &crate::report::compare::RuntimeInfo) -> String {
    match &r.plugin {
        Some(p) => format!("{} {} on {} {}", p.package, p.version, r.package, r.version),
        None => format!("{} {}", r.package, r.version),
    }
}

/// The figure a cell is ranked by (higher is better): its worst output's SQNR, or with a task
/// the points it did not lose against the reference (minus its drop); −∞ when it did not run.
pub fn rank_figure(c: &Cell) -> f64 {
    match (c.status, &c.task, c.sqnr_db) {
        (crate::report::RunStatus::Ok, Some(t), _) if !t.drop.value.0.is_nan() => -t.drop.value.0,
        (crate::report::RunStatus::Ok, None, Some(s)) if !s.0.is_nan() => s.0,
        _ => f64::NEG_INFINITY,
    }
}
