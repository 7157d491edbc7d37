//! `matrix --dataset --task`: each variant evaluated on the labelled set over every target (one
//! `eval`), each cell its target's task figures and gate; the recommendation then picks the
//! cheapest variant per chipset whose accuracy meets the limits, the field remedy (int8 here,
//! 16-bit there) decided in points of accuracy.

use std::path::Path;

use anyhow::Result;

use super::{MatrixOptions, MatrixTaskOptions, Variant};
use crate::commands::eval::EvalOptions;
use crate::data::target::{TargetPattern, TargetSpec};
use crate::foundation::userfile::Outputs;
use crate::report::eval::{EvalReport, EvalTarget};
use crate::report::matrix::{Cell, CellTask, MatrixTask};
use crate::report::RunStatus;

/// Evaluates `model` (the variant's file, `model_bytes` with its external data) on `specs` with
/// `variant`'s options, and returns each target's cell in `specs` order, with the eval's report.
pub fn eval_cells(
    opts: &MatrixOptions,
    task: &MatrixTaskOptions,
    variant: &Variant,
    (model, model_bytes): (&Path, u64),
    specs: &[TargetSpec],
) -> Result<(Vec<Cell>, EvalReport)> {
    let targets = specs
        .iter()
        .map(|spec| spec.with_options(&variant.options_for(&spec.backend)))
        .collect::<Result<Vec<_>>>()?;
    let eval = EvalOptions {
        model: model.to_path_buf(),
        golden: opts.golden.clone(),
        dataset: task.dataset.clone(),
        task: task.task.clone(),
        class_axis: opts.class_axis.clone(),
        targets: Some(targets.clone()),
        // A cell that does not run is a finding of the matrix, not a failure of its eval.
        allow_failure: vec![TargetPattern::all()],
        baseline: false,
        exec: opts.exec.clone(),
        stats: task.stats,
        policy: opts.policy.clone(),
        explain: 0,
        records: crate::commands::eval::Records::Work,
        task_files: task.task_files.clone(),
        shard: None,
        costs: Default::default(),
    };
    let report = crate::commands::eval::run(&eval, &mut Outputs::none())?;
    let cells = specs
        .iter()
        .zip(&targets)
        .filter_map(|(spec, with_options)| {
            let row = report.targets.iter().find(|t| t.id == with_options.id)?;
            Some(cell(&report, row, &variant.name, (spec, with_options), model_bytes))
        })
        .collect();
    Ok((cells, report))
}

/// The cell of `variant` on `spec` (as asked, and with the variant's options) from its row of
/// the eval.
fn cell(
    report: &EvalReport,
    row: &EvalTarget,
    variant: &str,
    (spec, with_options): (&TargetSpec, &TargetSpec),
    model_bytes: u64,
) -> Cell {
    let rules: Vec<_> = report.gate.rules.iter().filter(|r| r.target == row.id).collect();
    let ran = row.status == RunStatus::Ok;
    let failed_rules: Vec<String> = rules
        .iter()
        .filter(|r| !r.pass)
        .map(|r| format!("{} {}: {} vs {}", r.rule, r.output, r.measured.0, r.limit.0))
        .collect();
    let against_reference = row.comparisons.iter().find(|c| c.against == "reference");
    let task = match (&row.metrics, against_reference) {
        (Some(m), Some(c)) => Some(CellTask {
            samples: m.samples,
            primary: match (&report.task.primary[..], &m.cer) {
                ("cer", Some(cer)) => cer.clone(),
                _ => crate::report::eval::Estimate {
                    value: m.accuracy.value,
                    lo: m.accuracy.lo,
                    hi: m.accuracy.hi,
                    unbounded: None,
                },
            },
            drop: c.drop.clone(),
            drop_upper: c.drop_upper,
            fixed: c.fixed,
            broken: c.broken,
            mcnemar_p: c.mcnemar_p,
        }),
        _ => None,
    };
    Cell {
        variant: variant.to_string(),
        target: spec.id.clone(),
        status: row.status,
        error: row.error.clone(),
        meets_policy: ran && failed_rules.is_empty() && task.is_some(),
        failed_rules,
        worst_output: Some(report.task.output.clone()),
        sqnr_db: row.median_sqnr_db,
        max_abs: None,
        top1_agreement: None,
        compute_fallback_nodes: None,
        partitions: None,
        crossing_bytes: None,
        fallback_nodes: Vec::new(),
        model_bytes,
        runtime: row.runtime.as_ref().map(super::cells::runtime_text),
        options: with_options.options.iter().cloned().collect(),
        task,
    }
}

/// What the cells measured, from the first variant's eval (the set, the task and the reference
/// are the same in every one).
pub fn task_info(report: &EvalReport) -> MatrixTask {
    MatrixTask {
        dataset: report.dataset.clone(),
        task: report.task.clone(),
        statistics: report.statistics.clone(),
        reference_metrics: report.reference_metrics.clone(),
    }
}
